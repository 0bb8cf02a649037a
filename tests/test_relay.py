"""The tests' TCP relay (``tests/relay.py``) leaves no thread behind when closed: each
proxy a test makes would otherwise keep one blocked in ``accept()`` for the session."""

from __future__ import annotations

import socket
import threading

from tests.relay import Relay


class _Echo(Relay):
    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        client.close()
        server.close()


def _accepting() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("relay-accept-")]


def test_closing_a_relay_ends_its_accepting_thread() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        before = set(_accepting())
        relay = _Echo("127.0.0.1", server.getsockname()[1])
        assert len(set(_accepting()) - before) == 1
        relay.refuse()
        assert set(_accepting()) == before
        relay.accept_again()
        with socket.create_connection(("127.0.0.1", relay.port)):
            pass  # still relaying after accept_again
        relay.close()
        assert set(_accepting()) == before
