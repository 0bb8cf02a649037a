"""A TCP relay in front of a real database server, the base of the tests' proxies:
``tests/faults/proxy.py`` (cuts a connection after COMMIT) and ``tests/wire.py``
(counts round trips). Threads, not asyncio, so it serves a synchronous driver and an
event loop alike."""

from __future__ import annotations

import socket
import threading


class Relay:
    """Listens on :attr:`port`, on loopback; every connection accepted is paired with a
    new one to ``(host, port)``, and :meth:`_relay` starts what forwards between them.
    A subclass sets up its own state before calling ``__init__``, which starts
    accepting."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = False
        self._accepting = self._start_accepting()

    def _start_accepting(self) -> threading.Thread:
        thread = threading.Thread(target=self._accept, args=(self._listener,), daemon=True,
                                  name=f"relay-accept-{self.port}")
        thread.start()
        return thread

    def close(self) -> None:
        """Stop accepting (the accepting thread ends); connections already made are left alone."""
        self._closed = True
        self.refuse()

    def refuse(self) -> None:
        """Refuse new connections, as a stopped server's port does, until
        :meth:`accept_again` (connections already made are left alone)."""
        try:
            # Wakes the accept() under way (Linux): close() alone leaves its thread blocked.
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._accepting.join(timeout=5)

    def accept_again(self) -> None:
        """Listen again, on the same port."""
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._accepting = self._start_accepting()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()  # the server is down: so is this connection
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._relay(client, server)

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        raise NotImplementedError


def close_all(*sockets: socket.socket) -> None:
    """Shut down and close every socket, ignoring the ones already gone."""
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
