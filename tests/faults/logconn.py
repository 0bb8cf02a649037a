"""Connections of a log store cut at chosen points of its calls (:mod:`tests.faults.resp`),
while appenders and readers keep working: the log-store side of
:mod:`tests.faults.connkill`, whose :class:`~tests.faults.connkill.Run` it shares.

Two sessions at a time, each with two appenders (one per handle) and a reader; the
appenders move on to a new session every :data:`BATCHES_PER_LOG` batches. A batch's entry
ids say whose batch it is and how big (``a0.17.3of9``), so a batch in part is
recognisable. An append that raised :class:`OutcomeUnknown` is retried with the same
batch until it either returns (the first attempt had not landed) or raises
``ValueError`` because its ids are there already (it had); a plain ``StoreError``
means nothing landed, and the batch must never appear. At the end a checker on a
direct connection reads every session: 0 acknowledged batches missing, 0 in part, 0
failed batches present, 0 ids twice, 0 unknown ids, each writer's batches in order.

Cuts are counted against errors (:func:`cut_figures`): every call a cut hits fails
(but a take, which reads back what it took), and ``OutcomeUnknown`` is raised exactly
by the calls whose write command (a script that writes, ``RPUSH``...) had been sent
when their connection was cut, whether the server ran it (``after``, ``mid``) or never
saw it (``before``).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Literal

from storetest.contract import Message, OutcomeUnknown
from storetest.entries import Entry
from tests.faults.connkill import Run
from tests.faults.resp import MODES, RespProxy

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
BATCHES_PER_LOG = 50


@dataclass
class LogRun(Run):
    """What the log workers share, beyond :class:`Run`: each batch's fate."""

    sessions: dict[str, str] = field(default_factory=dict)  # batch -> session
    acked: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)
    resolved: Counter[str] = field(default_factory=Counter)
    reordered: int = 0
    latest: dict[str, str] = field(default_factory=dict)  # base session -> the one written now


def batch(writer: str, n: int, size: int) -> list[Entry]:
    out: list[Entry] = []
    for i in range(size):
        entry_id = f"{writer}.{n}.{i}of{size}"
        out.append(Entry.message(entry_id, out[-1].id if out else None, T0, Message.text("user", entry_id * 3)))
    return out


def parse(entry_id: str) -> tuple[str, int, int, int]:
    """(writer, batch number, index, size) of an id :func:`batch` made."""
    writer, n, rest = entry_id.split(".")
    index, _, size = rest.partition("of")
    return writer, int(n), int(index), int(size)


async def appender(run: LogRun, store: Any, base: str, writer: str, seed: int) -> None:
    rng = random.Random(seed)
    n = 0
    while not run.stop.is_set():
        n += 1
        # A new session every BATCHES_PER_LOG batches: reads (the proxy's and the
        # checker's) stay small, so the run's cost grows with the cuts only.
        session = run.latest[base] = f"{base}/{n // BATCHES_PER_LOG}"
        entries = batch(writer, n, rng.randint(1, 12))
        key = f"{writer}.{n}"
        run.sessions[key] = session
        _, exc = await run.attempt("append", session, partial(store.append, session, entries))
        if exc is None:
            run.acked.add(key)
        elif not isinstance(exc, OutcomeUnknown):
            run.failed.add(key)
        else:
            run.unresolved.add(key)
            for _ in range(50):
                got, exc = await run.attempt("append", session, partial(_again, store, session, entries))
                if exc is None:
                    run.resolved[got] += 1
                    run.unresolved.discard(key)
                    run.acked.add(key)
                    break


async def _again(store: Any, session: str, entries: list[Entry]) -> str:
    try:
        await store.append(session, entries)
    except ValueError as exc:
        if "already has" not in str(exc):
            raise
        return "unknown appends that had landed"
    return "unknown appends that had not landed"


async def reader(run: LogRun, store: Any, base: str) -> None:
    while not run.stop.is_set():
        session = run.latest.get(base, base)
        got, exc = await run.attempt("entries", session, partial(store.entries, session))
        if exc is None:
            torn, reordered, _, _ = judge(got)
            with run.lock:
                run.torn += torn
                run.reordered += reordered
                if torn:
                    run.problems.append(f"{session}: a read saw {torn} batches in part")
        await asyncio.sleep(0.002)


def judge(entries: list[Entry]) -> tuple[int, int, set[str], int]:
    """(batches in part, writers out of order, whole batches, ids seen twice) of a log."""
    indices: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    order: dict[str, list[int]] = {}
    ids = Counter(e.id for e in entries)
    for e in entries:
        writer, n, index, size = parse(e.id)
        key = f"{writer}.{n}"
        if key not in indices:
            order.setdefault(writer, []).append(n)
        indices.setdefault(key, []).append(index)
        sizes[key] = size
    whole = {k for k, idx in indices.items() if idx == list(range(sizes[k]))}
    reordered = sum(1 for ns in order.values() if ns != sorted(ns))
    return len(indices) - len(whole), reordered, whole, sum(n - 1 for n in ids.values())


def workers(run: LogRun, stores: list[Any], sessions: list[str], seed: int) -> list[Any]:
    made: list[Any] = []
    for s, session in enumerate(sessions):
        for i, store in enumerate(stores):
            made.append(partial(appender, run, store, session, f"w{s}{i}", seed + 10 * s + i))
        made.append(partial(reader, run, stores[s % len(stores)], session))
    return made


async def cut_at_random(
    proxy: RespProxy, rng: random.Random, cuts: int, commands: list[bytes], spare: Iterable[bytes] = ()
) -> None:
    """Arm ``cuts`` cuts one after another, each at a random mode and command (never one
    whose first argument is in ``spare``)."""
    while len(proxy.cuts) < cuts:
        await asyncio.sleep(rng.uniform(0.0, 0.01))
        proxy.arm(rng.choice(MODES), [rng.choice(commands)], spare)
        for _ in range(500):  # until a call sends that command (2 s at most)
            if proxy.cut.is_set():
                break
            await asyncio.sleep(0.004)
        proxy.disarm()


#: What a cut command is to the accounting: a write (its call raises OutcomeUnknown), a
#: read (its call raises StoreError), or a write whose outcome the store reads back
#: (its call returns, or raises StoreError when nothing was written).
Kind = Literal["write", "read", "recovered"]


def cut_figures(run: Run, proxy: RespProxy, kind_of: Callable[[bytes, bytes], Kind]) -> dict[str, Any]:
    """How the cuts compare with the errors they caused; ``kind_of(name, first
    argument)`` says what a command is (``EVALSHA``'s first argument names the script)."""
    kinds = Counter(kind_of(name, arg) for _, name, arg in proxy.cuts)
    unknown = sum(n for kind, n in run.errors.items() if kind.startswith("OutcomeUnknown"))
    errors = sum(run.errors.values())
    return {
        "cuts": dict(Counter(f"{mode} {name.decode()} ({kind_of(name, arg)})" for mode, name, arg in proxy.cuts)),
        "sent writes cut": kinds["write"],
        "OutcomeUnknown raised": unknown,
        "OutcomeUnknown not where a sent write lost its reply": abs(unknown - kinds["write"]),
        # Every cut fails its call, except a recovered write's, which may return.
        "failures not explained by a cut": max(0, errors - len(proxy.cuts))
        + max(0, kinds["write"] + kinds["read"] - errors),
    }


async def final_figures(run: LogRun, checker: Any) -> dict[str, Any]:
    torn = duplicated = reordered = 0
    whole: set[str] = set()
    present: set[str] = set()
    for session in sorted(set(run.sessions.values())):
        entries = await checker.entries(session)
        t, r, w, d = judge(entries)
        torn, reordered, duplicated = torn + t, reordered + r, duplicated + d
        whole |= w
        present |= {".".join(e.id.split(".")[:2]) for e in entries}
    return {
        "operations": dict(run.operations),
        "batches acknowledged": len(run.acked),
        "batches failed (StoreError)": len(run.failed),
        **dict(run.resolved),
        "torn": torn + run.torn,
        "lost": len(run.acked - whole),
        "duplicated": duplicated,
        "unexpected": len(present - set(run.sessions)),
        "reordered": reordered + run.reordered,
        "failed log batches that landed": len(run.failed & present),
        "never resolved": len(run.unresolved),
        "errors": dict(run.errors),
        "errors not a StoreError naming operation, session and cause": sum(
            1 for p in run.problems if "raised" in p or "does not name" in p or "hides" in p
        ),
        "problems": run.problems,
    }


async def handles_work_after(run: Run, stores: Iterable[Any], logs: Iterable[Any], session: str) -> None:
    """The same handles, once the network works again: a round of every call on each
    transcript store and each log store (a problem in ``run`` if one does not work)."""
    for i, (store, log) in enumerate(zip(stores, logs, strict=True)):
        await store.save(session, [])
        await store.add_steer(session, "after")
        if await store.take_steers(session) != ["after"] or await store.messages(session):
            run.problems.append("a handle did not work after the stalls")
        await log.append(f"{session}-after", batch(f"end{i}", 1, 2))
