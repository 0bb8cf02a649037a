"""A TCP proxy in front of a real database server that makes the two network faults no
server-side kill can: it cuts a connection after COMMIT has reached the server and
before its answer reaches the client (the server commits; the client sees a lost
connection), and it stalls the network, forwarding nothing either way and resetting
nothing, for as long as a test says (before a statement, or right after a COMMIT went
up: the server commits and its answer waits).
"""

from __future__ import annotations

import socket
import threading
import time

from tests.relay import Relay, close_all

#: The Postgres store's COMMIT (a simple query; "READ COMMITTED;" in its BEGIN does not
#: match). pymysql's: the COM_QUERY byte, then the text; the command byte keeps "READ
#: COMMITTED" in SET TRANSACTION from matching.
POSTGRES_COMMIT = b"COMMIT;"
MYSQL_COMMIT = b"\x03COMMIT"
#: The Redis stores' writes, each one command (their COMMIT): a script (a save, take or
#: log append) or an RPUSH (an add), as the names go on the wire in RESP.
REDIS_WRITES = (b"\r\n$7\r\nEVALSHA\r\n", b"\r\n$5\r\nRPUSH\r\n")
#: The end of a Redis store's read (its MULTI/EXEC).
REDIS_EXEC = b"\r\n$4\r\nEXEC\r\n"

#: One marker, or several (any of them matches).
Marker = bytes | tuple[bytes, ...]


def _holds(data: bytes, marker: Marker | None) -> bool:
    if marker is None:
        return False
    return any(m in data for m in marker) if isinstance(marker, tuple) else marker in data


class CuttingProxy(Relay):
    """Forwards every connection to ``(host, port)``. After :meth:`cut_after_commit`,
    the next client chunk holding the marker is forwarded, the server's answer is
    awaited and dropped, and both sides are closed. While stalled (:meth:`stall`,
    :meth:`stall_after_commit`), each direction of every connection holds what it reads
    until :meth:`resume`, then forwards it: a stall delays bytes, it loses none."""

    def __init__(self, host: str, port: int) -> None:
        self._armed: Marker | None = None
        self._stall_armed: Marker | None = None
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        #: Set once a cut has happened: the server has answered the COMMIT.
        self.cut = threading.Event()
        #: How many COMMITs were cut so far.
        self.cuts = 0
        #: Set once a stall armed by stall_after_commit has begun.
        self.stalled = threading.Event()
        #: Seconds each chunk of a server's reply waits before it is forwarded (a slow
        #: network that answers every statement, each just in time).
        self.reply_delay = 0.0
        #: The connections open now (client side, server side), for :meth:`reset`.
        self._open: set[tuple[socket.socket, socket.socket]] = set()
        super().__init__(host, port)

    def reset(self) -> int:
        """Reset every connection open now (both sides closed, wherever its command or
        reply is); returns how many."""
        with self._lock:
            pairs = list(self._open)
        for pair in pairs:
            close_all(*pair)
        return len(pairs)

    def cut_after_commit(self, marker: Marker) -> None:
        """Cut after the next client chunk holding ``marker``: the driver's COMMIT as
        it goes on the wire (``POSTGRES_COMMIT``, ``MYSQL_COMMIT``, ``REDIS_WRITES``)."""
        self.cut.clear()
        with self._lock:
            self._armed = marker

    def stall(self) -> None:
        """Forward nothing from now on, in either direction, until :meth:`resume`."""
        self._flowing.clear()

    def stall_after_commit(self, marker: Marker) -> None:
        """Stall right after forwarding the next client chunk holding ``marker``."""
        self.stalled.clear()
        with self._lock:
            self._stall_armed = marker

    def resume(self) -> None:
        """Forward again, what was held first."""
        with self._lock:
            self._stall_armed = None
        self._flowing.set()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        swallow = threading.Event()
        with self._lock:
            self._open.add((client, server))
        threading.Thread(target=self._up, args=(client, server, swallow), daemon=True).start()
        threading.Thread(target=self._down, args=(server, client, swallow), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, swallow: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                self._flowing.wait()
                stall_now = False
                with self._lock:
                    if _holds(data, self._armed):
                        self._armed = None
                        # Set before forwarding: whatever the server sends next is the answer.
                        swallow.set()
                    if _holds(data, self._stall_armed):
                        self._stall_armed = None
                        stall_now = True
                        # Before forwarding: the answer must find the network stalled.
                        self._flowing.clear()
                server.sendall(data)
                if stall_now:
                    self.stalled.set()
        except OSError:
            pass
        close_all(client, server)
        with self._lock:
            self._open.discard((client, server))

    def _down(self, server: socket.socket, client: socket.socket, swallow: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if swallow.is_set():
                    # The server answered the COMMIT; the client never hears it.
                    self.cuts += 1
                    self.cut.set()
                    break
                self._flowing.wait()
                if self.reply_delay:
                    time.sleep(self.reply_delay)
                client.sendall(data)
        except OSError:
            pass
        close_all(client, server)
