"""A TCP proxy in front of a real Redis server that reads enough RESP (the framing of
commands and replies, RESP2 and RESP3) to cut a connection at a chosen point of a
chosen command, and to stall every connection without resetting it.

Cuts (:meth:`RespProxy.arm`), each aimed at the next command whose name is in a given
set, on whichever connection sends it first:

- ``before``: the command reaches the proxy and goes no further; both sides are closed.
  The server never runs it; the client has sent it and hears nothing.
- ``after``: the command is forwarded, the server's whole reply to it is dropped, and
  both sides are closed: the server ran it; the client never hears so.
- ``mid``: the command is forwarded and the first half of the reply's bytes (at least
  one, never all) reach the client before both sides are closed.

Each cut is recorded as ``(mode, command name, first argument)`` in
:attr:`RespProxy.cuts` (the first argument of ``EVALSHA`` is the script's SHA-1, which
tells a script that writes from one that reads).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable

from tests.relay import Relay, close_all

#: What redis-py sends while opening a connection: never a cut's target, so every cut
#: lands inside a store's call, not in the handshake of the next connection.
HANDSHAKE = frozenset({b"CLIENT", b"HELLO", b"AUTH", b"SELECT", b"PING", b"READONLY"})
MODES = ("before", "after", "mid")


def message_end(buf: bytes, at: int = 0) -> int | None:
    """Where the RESP message starting at ``buf[at]`` ends, or ``None`` if it is not all
    in ``buf`` yet."""
    line_end = buf.find(b"\r\n", at)
    if at >= len(buf) or line_end < 0:
        return None
    kind, after = buf[at], line_end + 2
    if kind in b"$=!":  # bulk string, verbatim string, bulk error: a length, then bytes
        size = int(buf[at + 1 : line_end])
        end = after + size + 2
        return after if size < 0 else end if end <= len(buf) else None
    if kind in b"*~>%|":  # array, set, push, map (pairs), attribute (pairs, then the reply)
        count = int(buf[at + 1 : line_end])
        if count < 0:
            return after
        pos: int | None = after
        for _ in range(count * (2 if kind in b"%|" else 1)):
            pos = message_end(buf, pos)  # type: ignore[arg-type]
            if pos is None:
                return None
        return message_end(buf, pos) if kind == ord("|") else pos  # type: ignore[arg-type]
    return after  # a line: + - : _ , # (


def command_head(command: bytes) -> tuple[bytes, bytes]:
    """The upper-cased name and the first argument (``b""`` if none) of a command sent
    as a RESP array of bulk strings."""
    words: list[bytes] = []
    at = command.find(b"\r\n") + 2  # past "*<n>"
    while len(words) < 2 and at < len(command):
        start = command.find(b"\r\n", at) + 2  # past "$<len>"
        size = int(command[at + 1 : start - 2])
        words.append(command[start : start + size])
        at = start + size + 2
    return words[0].upper(), words[1] if len(words) > 1 else b""


class _Conn:
    """One client connection: the replies it still waits for, in order."""

    def __init__(self) -> None:
        self.waiting: list[tuple[bytes, bytes]] = []  # forwarded commands not answered yet
        self.target: tuple[str, int] | None = None  # (mode, index in waiting) of a cut
        self.lock = threading.Lock()


class RespProxy(Relay):
    """Forwards every connection to ``(host, port)`` a whole command or reply at a time."""

    def __init__(self, host: str, port: int) -> None:
        self._lock = threading.Lock()
        self._armed: tuple[str, frozenset[bytes], frozenset[bytes]] | None = None
        self._stalled = threading.Event()
        #: Every cut so far: (mode, name of the command it was aimed at, its first argument).
        self.cuts: list[tuple[str, bytes, bytes]] = []
        #: Set when the armed cut has happened.
        self.cut = threading.Event()
        super().__init__(host, port)

    def arm(self, mode: str, commands: Iterable[bytes], spare: Iterable[bytes] = ()) -> None:
        """Cut (``before``, ``after`` or ``mid``) at the next command named in ``commands``
        whose first argument is not in ``spare``."""
        assert mode in MODES, mode
        with self._lock:
            self.cut.clear()
            self._armed = (mode, frozenset(c.upper() for c in commands) - HANDSHAKE, frozenset(spare))

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    def stall(self, stalled: bool = True) -> None:
        """Forward nothing, in either direction, on every connection (reset none)."""
        if stalled:
            self._stalled.set()
        else:
            self._stalled.clear()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        conn = _Conn()
        threading.Thread(target=self._up, args=(client, server, conn), daemon=True).start()
        threading.Thread(target=self._down, args=(server, client, conn), daemon=True).start()

    def _record(self, mode: str, head: tuple[bytes, bytes]) -> None:
        with self._lock:
            self.cuts.append((mode, *head))
            self.cut.set()

    def _up(self, client: socket.socket, server: socket.socket, conn: _Conn) -> None:
        buf = b""
        try:
            while data := client.recv(65536):
                if self._stalled.is_set():
                    continue
                buf += data
                while (end := message_end(buf)) is not None:
                    command, buf = buf[:end], buf[end:]
                    head = command_head(command)
                    with self._lock:
                        armed = self._armed
                        hit = armed is not None and head[0] in armed[1] and head[1] not in armed[2]
                        if hit:
                            self._armed = None
                    with conn.lock:
                        if hit and armed is not None and armed[0] != "before":
                            conn.target = (armed[0], len(conn.waiting))
                        conn.waiting.append(head)
                    if hit and armed is not None and armed[0] == "before":
                        self._record("before", head)
                        raise ConnectionAbortedError
                    server.sendall(command)
        except OSError:
            pass
        close_all(client, server)

    def _down(self, server: socket.socket, client: socket.socket, conn: _Conn) -> None:
        buf = b""
        try:
            while data := server.recv(65536):
                if self._stalled.is_set():
                    continue
                buf += data
                while (end := message_end(buf)) is not None:
                    reply, buf = buf[:end], buf[end:]
                    with conn.lock:
                        head = conn.waiting.pop(0) if conn.waiting else (b"?", b"")
                        target = conn.target
                        if target is not None:
                            conn.target = (target[0], target[1] - 1) if target[1] else None
                    if target is not None and target[1] == 0:
                        if target[0] == "mid":
                            client.sendall(reply[: max(1, len(reply) // 2)])
                        self._record(target[0], head)
                        raise ConnectionAbortedError
                    client.sendall(reply)
        except OSError:
            pass
        close_all(client, server)
