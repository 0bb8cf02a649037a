"""The race engine: start several calls into a store at the same moment.

A race that never overlaps proves nothing. Async stores are raced by tasks released
together from one event; plain stores by threads that meet at a barrier, with the
interpreter's thread switch interval narrowed for the race (at the default 5 ms a
short method runs to completion before the next thread is even scheduled, so two
locked steps of one method never interleave with another call). This module is the
one place that knows threads from tasks; clauses call :func:`together`.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Final, TypeVar

__all__ = ["RACE_SWITCH_INTERVAL", "gather_all", "start_line", "together"]

T = TypeVar("T")

#: The thread switch interval during a race of plain calls, in seconds.
RACE_SWITCH_INTERVAL: Final = 1e-6

#: Longest wait at the barrier: a call that never reaches the store (it failed before)
#: must not hang the others.
_BARRIER_TIMEOUT: Final = 2.0

_START: contextvars.ContextVar[threading.Barrier | None] = contextvars.ContextVar(
    "storetest_start_line", default=None
)


def start_line() -> threading.Barrier | None:
    """The barrier the current task's first plain call must wait at, once; ``None``
    outside a race or after that first call. The plain-call adapter calls this."""
    barrier = _START.get()
    if barrier is not None:
        _START.set(None)
    return barrier


def wait_at(barrier: threading.Barrier | None) -> None:
    if barrier is None:
        return
    try:
        barrier.wait(_BARRIER_TIMEOUT)
    except threading.BrokenBarrierError:
        pass  # a party never came; run anyway rather than hang


@contextmanager
def _narrow_switch_interval() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(RACE_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


async def gather_all(work: Sequence[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` that waits for every task before raising the first error, so
    no task is left running against the store when a clause fails."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


async def together(calls: Sequence[Callable[[], Awaitable[T]]], *, threads: bool) -> list[T]:
    """Run every call at once and return their results in order, after all finished
    (the first error is raised then).

    :param threads: the calls go to plain store methods on threads: they meet at a
        barrier just before entering the store, and the switch interval is narrowed
        until the last one returns. Otherwise they are tasks released by one event.
    """
    go = asyncio.Event()
    barrier = threading.Barrier(len(calls)) if threads and len(calls) > 1 else None

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        # Set inside the task, so only this task's first store call sees it.
        _START.set(barrier)
        await go.wait()
        return await call()

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    await asyncio.sleep(0)  # every task is now waiting on `go`
    if barrier is None:
        go.set()
        return await gather_all(tasks)
    with _narrow_switch_interval():
        go.set()
        return await gather_all(tasks)
