"""A pytest plugin (registered by tests/conftest.py): every test must give back the
process-wide state it changes, so no test depends on what ran before it on the same
worker, or on how the process was started (issue 44).

Before each test it notes the signal handlers, the signals blocked on the main thread,
the event-loop policy, ``sys.getswitchinterval()``, the environment variables and the
working directory; after the test's teardown, whatever differs is put back and the test
gets an error naming it (so the run fails, under xdist too).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

#: The signals whose handlers a test may change (the ones this project's code or its
#: tests install handlers for, and those a library might take).
SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGALRM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                       "SIGCHLD", "SIGPIPE", "SIGXFSZ")
    if hasattr(signal, name)
)


def snapshot() -> dict[str, Any]:
    """The process-wide state a test must leave as it found it."""
    main = threading.current_thread() is threading.main_thread()
    state: dict[str, Any] = {
        f"the {signal.Signals(s).name} handler": signal.getsignal(s) for s in SIGNALS
    }
    if main and hasattr(signal, "pthread_sigmask"):
        state["the signals blocked on the main thread"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if main and hasattr(signal, "getitimer"):
        state["the interval timer (ITIMER_REAL) being set"] = signal.getitimer(signal.ITIMER_REAL)[0] > 0
    state["the event-loop policy"] = asyncio.get_event_loop_policy()
    state["sys.getswitchinterval()"] = sys.getswitchinterval()
    # pytest's own, which it sets to the phase it is in.
    state["the environment variables"] = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    state["the working directory"] = os.getcwd()
    return state


def _describe(name: str, before: Any, after: Any) -> str:
    if isinstance(before, dict):
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        return f"{name}: {', '.join(changed)} changed"
    return f"{name}: {before!r} before, {after!r} after"


def restore(state: dict[str, Any]) -> None:
    """Put back what :func:`snapshot` noted."""
    for s in SIGNALS:
        handler = state[f"the {signal.Signals(s).name} handler"]
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)
    blocked = state.get("the signals blocked on the main thread")
    if blocked is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if state.get("the interval timer (ITIMER_REAL) being set") is False:
        signal.setitimer(signal.ITIMER_REAL, 0)
    asyncio.set_event_loop_policy(state["the event-loop policy"])
    sys.setswitchinterval(state["sys.getswitchinterval()"])
    env = state["the environment variables"]
    for key in set(os.environ) - set(env) - {"PYTEST_CURRENT_TEST"}:
        del os.environ[key]
    os.environ.update(env)
    os.chdir(state["the working directory"])


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two snapshots, one line each."""
    return [_describe(k, before[k], after.get(k)) for k in before if after.get(k) != before[k]]


@pytest.fixture(autouse=True)
def _gives_back_process_state() -> Iterator[None]:
    # Autouse and function-scoped: set up before the test's other function fixtures and
    # torn down after them (a monkeypatch is undone by then); session fixtures are set
    # up before it, so the servers they start are not the test's doing.
    before = snapshot()
    yield
    after = snapshot()
    changed = changes(before, after)
    if changed:
        restore(before)
        pytest.fail("the test left process-wide state changed (put back now, for the tests after it): "
                    + "; ".join(changed), pytrace=False)
