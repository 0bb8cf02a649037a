"""Round trips counted on the wire: a TCP proxy in front of a real database server that
reads the protocol's framing as it forwards it.

- PostgreSQL: the server's ReadyForQuery messages (``Z``), its "done, your turn": one
  per simple query and one per ``Sync`` of the extended protocol, so one per round
  trip. Connect without TLS (``ssl=False``), or the stream is not readable.
- MySQL/MariaDB: the client's commands, the packets whose sequence id is 0 (a command
  starts a new sequence; handshake packets and the parts of a command cut at 16 MiB
  do not). pymysql waits for the answer to each, so one per round trip.

A message is counted before the proxy forwards its last byte, so by the time the client
has its answer, the count includes it.
"""

from __future__ import annotations

import socket
import threading
from typing import Literal

from tests.relay import Relay, close_all

Protocol = Literal["postgres", "mysql"]


class RoundTrips(Relay):
    """Forwards every connection to ``(host, port)``; :attr:`count` is the number of
    round trips all of them made so far."""

    def __init__(self, host: str, port: int, protocol: Protocol) -> None:
        self._protocol = protocol
        self._lock = threading.Lock()
        self._count = 0
        super().__init__(host, port)

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        counted_from_server = self._protocol == "postgres"
        threading.Thread(target=self._pump, args=(client, server, not counted_from_server), daemon=True).start()
        threading.Thread(target=self._pump, args=(server, client, counted_from_server), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, counted: bool) -> None:
        reader = _Frames(self._protocol) if counted else None
        try:
            while data := source.recv(65536):
                if reader is not None and (found := reader.feed(data)):
                    with self._lock:
                        self._count += found
                target.sendall(data)
        except OSError:
            pass
        close_all(source, target)


class _Frames:
    """Reads one direction's message headers, skipping bodies without keeping them."""

    def __init__(self, protocol: Protocol) -> None:
        # PostgreSQL: type (1 byte), then length (4 bytes, big-endian, counting itself).
        # MySQL: payload length (3 bytes, little-endian), then sequence id (1 byte).
        self._postgres = protocol == "postgres"
        self._header = b""
        self._skip = 0

    def feed(self, data: bytes) -> int:
        """How many counted messages begin in ``data``."""
        found = 0
        size = 5 if self._postgres else 4
        at = 0
        while at < len(data):
            if self._skip:
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            take = data[at : at + size - len(self._header)]
            self._header += take
            at += len(take)
            if len(self._header) < size:
                break
            header, self._header = self._header, b""
            if self._postgres:
                self._skip = int.from_bytes(header[1:5], "big") - 4
                found += header[0] == ord("Z")
            else:
                self._skip = int.from_bytes(header[0:3], "little")
                found += header[3] == 0
        return found
