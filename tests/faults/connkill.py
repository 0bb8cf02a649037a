"""Connections killed at random points in every operation, while savers, readers,
adders and takers keep working.

The stores under test reach the server through a :class:`CuttingProxy`. A killer
picks, at random moments, either a server-side kill of one of their connections
(``pg_terminate_backend``, MariaDB's ``KILL``), which lands wherever the operation is,
or a cut right after the next COMMIT reached the server (the one point a server-side
kill cannot aim at, and the one that makes ``OutcomeUnknown``). A checker on a direct
connection, never killed, verifies after every save that a failed save changed
nothing and that every transcript read is whole.

Workers are written once, as coroutines over a store whose methods may be plain or
async: on Postgres they share one event loop, on MariaDB each runs in a thread.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from storetest.contract import OutcomeUnknown
from tests.faults.workload import SteerLedger, error_kind, error_problem, transcript, whole

QUEUE = "conn-queue"


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@dataclass
class Run:
    """What the workers share: the stop signal, the ledger, and the tallies."""

    checker: Any  # a store on a direct connection, never killed
    stop: threading.Event = field(default_factory=threading.Event)
    ledger: SteerLedger = field(default_factory=SteerLedger)
    errors: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    operations: Counter[str] = field(default_factory=Counter)
    torn: int = 0
    failed_saves_that_changed_something: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Every call: operation, start and end (time.monotonic()), outcome ("ok" or its kind).
    calls: list[tuple[str, float, float, str]] = field(default_factory=list)

    async def attempt(
        self, op: str, session: str, call: Callable[[], Any]
    ) -> tuple[Any, BaseException | None]:
        with self.lock:
            self.operations[op] += 1
        start = time.monotonic()
        try:
            result = await _call(call())
        except Exception as exc:
            with self.lock:
                self.calls.append((op, start, time.monotonic(), error_kind(exc)))
                self.errors[error_kind(exc)] += 1
                problem = error_problem(op, session, exc)
                if problem:
                    self.problems.append(problem)
            return None, exc
        with self.lock:
            self.calls.append((op, start, time.monotonic(), "ok"))
        return result, None

    async def observe(self, session: str, possible: set[tuple[str, int]], why: str) -> set[tuple[str, int]]:
        got = whole(await _call(self.checker.messages(session)))
        with self.lock:
            if got is None:
                self.torn += 1
                self.problems.append(f"{session}: torn transcript {why}")
                return possible
            if got not in possible:
                self.problems.append(f"{session}: holds {got} {why}; expected one of {sorted(possible)}")
                if why.startswith("after a failed save"):
                    self.failed_saves_that_changed_something += 1
        return {got}


async def saver(run: Run, store: Any, session: str) -> None:
    """One writer per session, so after each save the checker knows what it may hold."""
    possible = {("", 0)}
    # Saves that raised OutcomeUnknown since the last one that returned: one held in a
    # stalled network still reaches the server after its call gave up, and may land then
    # (never over a save that returned: that one must stay).
    pending: set[tuple[str, int]] = set()
    generation = 0
    while not run.stop.is_set():
        generation += 1
        messages = transcript(session, generation)
        new = whole(messages)  # every empty transcript is ("", 0)
        assert new is not None
        _, exc = await run.attempt("save", session, partial(store.save, session, messages))
        if exc is None:
            pending.clear()
            possible = await run.observe(session, {new}, "after a save returned")
        elif isinstance(exc, OutcomeUnknown):
            pending.add(new)
            possible = await run.observe(session, possible | pending, "after OutcomeUnknown") | pending
        else:
            possible = await run.observe(session, possible | pending, f"after a failed save ({exc})") | pending
        got, exc = await run.attempt("messages", session, partial(store.messages, session))
        if exc is None and whole(got) is None:
            with run.lock:
                run.torn += 1
                run.problems.append(f"{session}: torn transcript read through the store")


async def adder(run: Run, store: Any, name: str) -> None:
    n = 0
    while not run.stop.is_set():
        n += 1
        text = f"{name}:{n}"
        for _ in range(50):
            _, exc = await run.attempt("add_steer", QUEUE, partial(store.add_steer, QUEUE, text))
            run.ledger.added(text, exc)
            # Retry only an unknown outcome: at least once, as the contract says.
            if not isinstance(exc, OutcomeUnknown):
                break


async def taker(run: Run, store: Any) -> None:
    while not run.stop.is_set():
        got, exc = await run.attempt("take_steers", QUEUE, partial(store.take_steers, QUEUE))
        run.ledger.took(got, exc)
        if not got:
            await asyncio.sleep(0.001)


def workers(run: Run, stores: list[Any], sessions: list[str]) -> list[Callable[[], Awaitable[None]]]:
    """Two savers (each with its own session), two adders, two takers, spread over
    ``stores``."""
    count = len(stores)
    made: list[Callable[[], Awaitable[None]]] = []
    for i, session in enumerate(sessions):
        made.append(partial(saver, run, stores[i % count], session))
    for i in range(2):
        made.append(partial(adder, run, stores[i % count], f"a{i}"))
        made.append(partial(taker, run, stores[(i + 1) % count]))
    return made


async def drain(run: Run) -> None:
    while got := await _call(run.checker.take_steers(QUEUE)):
        run.ledger.taken.append(got)


def figures(run: Run, kills: Counter[str]) -> dict[str, Any]:
    verdict = run.ledger.verdict()
    return {
        **{f"connection kills: {k}": v for k, v in sorted(kills.items())},
        "operations": dict(run.operations),
        "torn": run.torn,
        "failed saves that changed something": run.failed_saves_that_changed_something,
        **verdict,
        "errors": dict(run.errors),
        "errors not a StoreError naming operation, session and cause": sum(
            1 for p in run.problems if "raised" in p or "does not name" in p or "hides" in p
        ),
        "problems": run.problems,
    }


def pause(rng: random.Random) -> float:
    # Mostly short, so kills land inside operations, not between them.
    return rng.uniform(0.0, 0.015)




async def stall_twice(proxy: Any, commit: Any, hold: float,
                      stalls: list[tuple[str, Any]] | None = None) -> list[tuple[str, float, float]]:
    """Stall the network twice under the running workers, ``hold`` seconds each (longer
    than the stores' bound): from a moment between statements, and right after a COMMIT
    (``commit``, as the proxy's marker) went up; or once per ``(name, marker)`` of
    ``stalls`` (no marker: at once). Returns each stall's name, start and end
    (``time.monotonic()``)."""
    windows = []
    for where, marker in stalls or [("before a statement", None), ("at COMMIT", commit)]:
        await asyncio.sleep(0.5)
        if marker is not None:
            proxy.stall_after_commit(marker)
            while not proxy.stalled.is_set():
                await asyncio.sleep(0.001)
        else:
            proxy.stall()
        start = time.monotonic()
        await asyncio.sleep(hold)
        proxy.resume()
        windows.append((where, start, time.monotonic()))
    await asyncio.sleep(0.5)
    return windows


class Oversleep:
    """How long this process was kept from running while the block ran: a thread sleeps
    20 ms at a time and keeps the most it woke late. A loaded machine (or the process
    paused) stretches every call in flight alike, beyond what the store bounds."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="oversleep", daemon=True)

    def _watch(self) -> None:
        while not self._done.is_set():
            began = time.monotonic()
            time.sleep(0.02)
            self.worst = max(self.worst, time.monotonic() - began - 0.02)

    def __enter__(self) -> Oversleep:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def stall_rows(run: Run, windows: list[tuple[str, float, float]], bound: float,
               slack: float = 1.0) -> list[dict[str, Any]]:
    """The stall table: what the calls caught in each stall (begun before it ended,
    ended after it began) did, and how long they took. Every call longer than the
    bound plus ``slack`` (1 s of scheduling, and where the caller measured it, the
    longest the process was kept from running: :class:`Oversleep`) becomes a problem."""
    rows = []
    for where, start, end in windows:
        caught = [c for c in run.calls if c[1] < end and c[2] > start]
        rows.append({
            "stall": where, "held (s)": round(end - start, 1), "calls caught": len(caught),
            "StoreError": sum(c[3].startswith("StoreError") for c in caught),
            "OutcomeUnknown": sum(c[3].startswith("OutcomeUnknown") for c in caught),
            "returned": sum(c[3] == "ok" for c in caught),
            "slowest (s)": round(max((c[2] - c[1] for c in caught), default=0.0), 2),
        })
    run.problems += [f"{op} took {e - s:.2f} s (bound {bound} s, slack {slack:.2f} s)"
                     for op, s, e, _ in run.calls if e - s > bound + slack]
    return rows
