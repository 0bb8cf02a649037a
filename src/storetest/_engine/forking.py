"""The fork server: one process forked from this one before the clauses run, holding
the factories as objects, that forks the children the process clauses and the crash
clauses ask for. A child costs a fork (milliseconds), not an interpreter start and the
imports of storetest, Hypothesis and the store's SDK; and it inherits the factory
itself, so a lambda, a closure or a factory a helper built works as well as a function
a child could import by name.

Where it is forked: under pytest, at the end of collection (every factory given to
``run_conformance`` exists then, and no clause has run), in the process that runs the
tests (each xdist worker, for its own tests); by ``check()`` at its start when no such
server holds its factories (``storetest check``, a script, a test calling ``check()``).
Either way it is forked before that run starts a thread; threads that exist already
(xdist's own in a worker, a driver's pool made at import, an earlier run's) are not
copied into it, only their memory, so a lock one of them held at that moment stays
held in the server and its children.

Where fork is not used, children are spawned and import the factory as
``module:function`` (:mod:`storetest._engine.backends`): on a platform without fork,
or when the environment sets ``STORETEST_CHILDREN=spawn``.
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Final

from storetest._engine.crashing import Zygote

__all__ = ["MODE", "server_for", "serving", "start_shared", "stop_shared", "unavailable"]

#: The environment variable that chooses how child processes start: ``spawn`` to
#: spawn them (the fallback), anything else (or unset) to fork them where the OS can.
MODE: Final = "STORETEST_CHILDREN"

_CURRENT: contextvars.ContextVar[Zygote | None] = contextvars.ContextVar("storetest_fork_server", default=None)
#: The servers forked at the end of pytest's collection, innermost session last (a
#: session run inside a test, as pytester does, stacks its own on its parent's).
_SHARED: list[Zygote] = []
_LOCK = threading.Lock()


def unavailable() -> str:
    """Why children are spawned rather than forked here, or "" if they are forked."""
    if os.environ.get(MODE, "").strip().lower() == "spawn":
        return f"{MODE}=spawn is set"
    if not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods():
        return f"this platform ({sys.platform}) has no fork"
    return ""


def _alive(server: Zygote | None) -> bool:
    return server is not None and not server.broken and server.process.is_alive()


def start_shared(objects: Iterable[Any]) -> Zygote | None:
    """Fork a shared server now, holding ``objects`` (the factories collected), for
    :func:`serving` to find until :func:`stop_shared`; ``None`` if fork is not used here."""
    held = [o for o in objects if o is not None]
    if unavailable() or not held:
        return None
    server = Zygote(None, held, name="storetest's fork server")
    with _LOCK:
        _SHARED.append(server)
    return server


def stop_shared(server: Zygote) -> None:
    """End ``server``, one :func:`start_shared` returned."""
    with _LOCK:
        if server in _SHARED:
            _SHARED.remove(server)
    server.close()


def _knows(server: Zygote | None, objects: Iterable[Any]) -> bool:
    return _alive(server) and all(id(o) in server.objects for o in objects if o is not None)  # type: ignore[union-attr]


@contextlib.contextmanager
def serving(objects: Iterable[Any], needed: bool) -> Iterator[None]:
    """Within the block, children of ``objects`` are forked by a server that holds
    them: the shared one if it does, else (if ``needed``) one forked now and closed at
    the end. Nothing if fork is not used here."""
    held = [o for o in objects if o is not None]
    shared = next((s for s in reversed(_SHARED) if _knows(s, held)), None)
    if shared is not None:
        server: Zygote | None = shared
        own = False
    elif needed and not unavailable():
        server = Zygote(None, held, name="storetest's fork server")
        own = True
    else:
        yield
        return
    token = _CURRENT.set(server)
    try:
        yield
    finally:
        _CURRENT.reset(token)
        if own:
            server.close()  # type: ignore[union-attr]


def server_for(made: Any) -> tuple[Zygote, int] | None:
    """The fork server holding ``made`` and its key there, or ``None`` (spawn instead)."""
    server = _CURRENT.get()
    if _knows(server, [made]):
        return server, id(made)  # type: ignore[return-value]
    return None
