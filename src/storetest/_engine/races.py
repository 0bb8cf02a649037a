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
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Final, TypeVar

from storetest._engine.stops import in_thread

__all__ = [
    "RACE_SWITCH_INTERVAL",
    "gather_all",
    "in_plain_race",
    "in_race",
    "preemptible",
    "start_line",
    "threaded",
    "together",
    "wait_at",
]

T = TypeVar("T")

#: The thread switch interval during a race of plain calls, in seconds.
RACE_SWITCH_INTERVAL: Final = 1e-4

#: Longest wait at the barrier: a call that never reaches the store (it failed before)
#: must not hang the others.
_BARRIER_TIMEOUT: Final = 2.0

#: A ``sched_yield`` longer than this, before a race, gave the CPU to another process.
_SLOW_YIELD: Final = 200e-6
#: During a race, one longer than this may have: a racer's thread given the CPU yields
#: it back at its next line, but another process keeps it for a time slice.
_SLOW_YIELD_IN_RACE: Final = 1e-3
#: ... but one slow yield is no proof: on an idle machine, a race of many threads has
#: some (its other racers ran meanwhile, or the host took the CPU). A race turns to
#: ``sleep(0)`` once this many of its yields were slow, and at least a quarter of them.
_SLOW_YIELDS_TO_TURN: Final = 8

_sched_yield: Callable[[], None] | None = getattr(os, "sched_yield", None)
# Decided as each race starts: whether other processes want the CPUs.
_machine_busy = False
# The current race's yields, and its slow ones (counts under the GIL: near enough).
_yields = 0
_slow_yields = 0


def _sleep_zero() -> None:
    time.sleep(0)


def _yield_to_others() -> None:
    """Let the other racers run: called at every traced line.

    ``os.sched_yield()`` releases the GIL, signalling a racer that waits for it, and
    returns in about 1 µs on an idle machine; ``time.sleep(0)`` sleeps for the kernel's
    timer slack, about 50 µs, at every line, which was most of a race's cost. But while
    another process wants the CPU, ``sched_yield`` hands it that process's whole time
    slice, where a sleeper is woken at once: on a busy machine (seen as the race starts,
    or in a quarter of its yields taking a time slice) the race yields with ``sleep(0)``.
    ``benchmarks/race_yield.py`` measures the ways, idle and loaded;
    ``scripts/race_rounds.py --yield sleep`` compares what one round catches with
    ``sleep(0)`` alone.
    """
    global _machine_busy, _yields, _slow_yields
    if _machine_busy or _sched_yield is None:
        _sleep_zero()
        return
    _yields += 1
    if _slow(_sched_yield, _SLOW_YIELD_IN_RACE):
        _slow_yields += 1
        _machine_busy = _slow_yields >= _SLOW_YIELDS_TO_TURN and 4 * _slow_yields >= _yields


def _pass_on() -> None:
    """Let another thread run, the way the race yields now, without counting the yield:
    the start line's spins, which wait for threads still waking, say nothing of whether
    another process wants the CPU."""
    if _machine_busy or _sched_yield is None:
        _sleep_zero()
    else:
        _sched_yield()


def _race_starts() -> None:
    """Decide how this race yields. Before it starts no racer's thread is running, so a
    ``sched_yield`` that takes long gave the CPU to another process."""
    global _machine_busy, _yields, _slow_yields
    _yields = _slow_yields = 0
    _machine_busy = _sched_yield is None or any(_slow(_sched_yield, _SLOW_YIELD) for _ in range(3))


def _slow(call: Callable[[], None], limit: float) -> bool:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began > limit


class StartLine:
    """Where racing threads wait for each other. Not a ``threading.Barrier``: its
    waiters wake one at a time through a condition's lock, so the first one released
    finishes a short call before the last has woken. Here threads sleep until all have
    arrived (a spinning thread would take the interpreter from the ones still on their
    way), then each spins until all are awake, so all are running when the last one
    wakes. A spinner hands the interpreter on at every turn, as a racer does at every
    line (:func:`_pass_on`): one that kept it for the switch interval made each thread
    still waking wait for it (a start of eight threads took 7.5 times as long:
    ``benchmarks/start_line.py``)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.awake = 0
        self.lock = threading.Lock()
        self.everyone_here = threading.Event()
        self.go = False

    def wait(self) -> None:
        deadline = time.monotonic() + _BARRIER_TIMEOUT
        with self.lock:
            self.arrived += 1
            last = self.arrived >= self.parties
        if last:
            self.everyone_here.set()
        else:
            self.everyone_here.wait(_BARRIER_TIMEOUT)
        with self.lock:
            self.awake += 1
            if self.awake >= self.parties:
                self.go = True
        while not self.go and time.monotonic() < deadline:
            _pass_on()  # runnable, and the ones still waking get the interpreter


_START: contextvars.ContextVar[StartLine | None] = contextvars.ContextVar(
    "storetest_start_line", default=None
)
# Set for the whole of a racing task of plain calls, not only its first call: a racer
# that adds twice or takes twice must be preemptible in every call it makes.
_PLAIN_RACE: contextvars.ContextVar[bool] = contextvars.ContextVar("storetest_plain_race", default=False)
# Set for every racing task, of plain calls or not: its calls share the loop with others'.
_RACING: contextvars.ContextVar[bool] = contextvars.ContextVar("storetest_racing", default=False)


def start_line() -> StartLine | None:
    """The barrier the current task's first plain call must wait at, once; ``None``
    outside a race or after that first call. The plain-call adapter calls this."""
    barrier = _START.get()
    if barrier is not None:
        _START.set(None)
    return barrier


def in_plain_race() -> bool:
    """Whether the current task races plain calls against others: each of its calls
    runs :func:`preemptible`, the first after waiting at the start line."""
    return _PLAIN_RACE.get()


def in_race() -> bool:
    """Whether the current task is one of several that :func:`together` runs at once
    (its plain calls must then leave the loop free for the others')."""
    return _RACING.get()


def wait_at(line: StartLine | None) -> None:
    # A party that never comes (its call failed first) costs the others the timeout.
    if line is not None:
        line.wait()


@contextmanager
def preemptible(roots: Sequence[str]) -> Iterator[None]:
    """Yield this thread to the others between any two lines of the store's own code
    (files under ``roots``) while the block runs.

    A narrowed switch interval alone is not enough: CPython switches threads only where
    it checks for requests (a Python function starting, a loop jumping back), so a
    method like ``with lock: read`` / ``with lock: trim`` has no switch point between
    its steps, and on a busy machine waking another thread takes longer than the whole
    method. A line tracer that yields the interpreter makes every line a point where
    the other racers run, as ``await asyncio.sleep(0)`` does for tasks. Frames outside
    ``roots`` (drivers, the standard library) are not traced.
    """

    def local(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        if event == "line":
            _yield_to_others()
        return local

    def on_call(frame: FrameType, event: str, arg: object) -> Callable[..., object] | None:
        return local if frame.f_code.co_filename.startswith(tuple(roots)) else None

    previous = sys.gettrace()
    sys.settrace(on_call if roots else previous)  # type: ignore[arg-type]
    try:
        yield
    finally:
        sys.settrace(previous)


#: Races narrowing the switch interval now, and the interval before the first of them.
#: A race left in a stuck call may still be inside when the next race begins: the
#: interval is put back once the last one ends, to what it was before any began.
_narrowing = 0
_unnarrowed = 0.0
_narrowing_lock = threading.Lock()


@contextmanager
def _narrow_switch_interval() -> Iterator[None]:
    global _narrowing, _unnarrowed
    with _narrowing_lock:
        if _narrowing == 0:
            _unnarrowed = sys.getswitchinterval()
            sys.setswitchinterval(RACE_SWITCH_INTERVAL)
        _narrowing += 1
    try:
        yield
    finally:
        with _narrowing_lock:
            _narrowing -= 1
            if _narrowing == 0:
                sys.setswitchinterval(_unnarrowed)


async def threaded(call: Callable[[], T], roots: Sequence[str]) -> T:
    """Run a plain call on a thread, as a binding hands a sync store's call (and its
    constructor) to one (:func:`storetest._engine.stops.in_thread`: past the deadline
    it is abandoned, not cancelled). In a race of plain calls (:func:`together` with ``threads``)
    the thread waits at the start line first and runs :func:`preemptible` over ``roots``,
    as a plain store's own calls do: a constructor that checks for its table, then
    creates it, is then raced line by line, not as one step."""
    if not in_plain_race():
        return await in_thread(call)
    barrier = start_line()

    def run() -> T:
        wait_at(barrier)
        with preemptible(roots):
            return call()

    return await in_thread(run)


async def gather_all(work: Sequence[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` that waits for every task before raising the first error, so
    no task is left running against the store when a clause fails."""
    results = await asyncio.gather(*work, return_exceptions=True)
    # A call past its deadline, or Ctrl-C, ends the clause: it outranks a store's error.
    stops = [r for r in results if isinstance(r, BaseException) and not isinstance(r, Exception)]
    for result in stops or results:
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
    barrier = StartLine(len(calls)) if threads and len(calls) > 1 else None

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        # Set inside the task: only this task's first store call sees the start line,
        # and all of its calls are preemptible.
        _START.set(barrier)
        _PLAIN_RACE.set(barrier is not None)
        _RACING.set(True)
        await go.wait()
        return await call()

    tasks = [asyncio.ensure_future(one(call)) for call in calls]
    await asyncio.sleep(0)  # every task is now waiting on `go`
    if barrier is None:
        go.set()
        return await gather_all(tasks)
    _race_starts()
    with _narrow_switch_interval():
        go.set()
        return await gather_all(tasks)
