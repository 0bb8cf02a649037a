"""The memory log store keeps the log contract, checked directly; every broken log
store breaks it in its own way, shown by the one check meant for it (the target the
log clauses must hit).

Each check returns ``None`` when the store behaves, else what went wrong.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone

import pytest

from reference_stores.memory_log import MemoryLogBackend, MemoryLogStore
from storetest import check
from storetest._engine import strategies
from storetest.clauses import CLAUSES
from storetest.contract import Message
from storetest.entries import Entry, SessionExists
from storetest.projections import compact, fork, model_view, path
from tests.broken_stores import log_variants as v
from tests.overlap import SIX_ROUNDS

T0 = datetime(2026, 5, 1, 12, 0, 0, 0, UTC)
#: Values at the edges a server store must keep exactly: NUL in ids, kinds and text, the
#: first and last instants ``datetime`` holds at the widest offsets, raw JSON as given.
EDGE_ENTRIES = (
    Entry.custom("\x00", None, datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "k\x00", "1e400"),
    Entry.custom("é", "\x00", datetime(9999, 12, 31, 23, 59, 59, 999999, timezone(timedelta(hours=-12))),
                 "k", '{"z":1, "a":[1, 2],"z":3}'),
    Entry.compaction("c", "é", T0, "sum\x00mary", "\x00"),
)
Check = Callable[[type[MemoryLogStore]], Awaitable[str | None]]


def msg(entry_id: str, parent: str | None, when: datetime = T0) -> Entry:
    return Entry.message(entry_id, parent, when, Message.text("user", entry_id))


def chain(prefix: str, n: int, parent: str | None = None) -> list[Entry]:
    out = []
    for i in range(n):
        out.append(msg(f"{prefix}{i}", parent))
        parent = out[-1].id
    return out


# --- the checks ------------------------------------------------------------------------


async def times_kept_exactly(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    sent = [Entry.message(f"t{i}", None, t, Message.text("user", "x"))
            for i, t in enumerate(strategies.NASTY_TIMES)]
    await store.append("s", sent)
    got = await store.entries("s")
    return None if got == sent else f"times changed: {[e.created_at.isoformat() for e in got]}"


async def custom_json_kept(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    sent = [Entry.custom(f"c{i}", None, T0, "artifact", text) for i, text in enumerate(strategies.NASTY_JSON)]
    await store.append("s", sent)
    got = await store.entries("s")
    return None if got == sent else "custom JSON changed"


async def kinds_kept(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    sent = [Entry.meta("m", None, T0, Message.text("system", "note")), msg("a", "m"),
            Entry.compaction("c", "a", T0, "sum", "a")]
    await store.append("s", sent)
    got = await store.entries("s")
    return None if got == sent else f"kinds changed: {[e.kind for e in got]}"


async def _refused_and_unchanged(
    store: MemoryLogStore, before: list[Entry], batch: list[Entry]
) -> str | None:
    try:
        await store.append("s", batch)
    except ValueError:
        pass
    else:
        return "accepted"
    after = await store.entries("s")
    return None if after == before else f"refused, but the log changed: {[e.id for e in after]}"


async def duplicate_ids_refused(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", chain("e", 3))
    before = await store.entries("s")
    return await _refused_and_unchanged(store, before, [msg("e1", "e2")])


async def orphans_refused(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", chain("e", 2))
    before = await store.entries("s")
    return await _refused_and_unchanged(store, before, [msg("x", "not-there")])


async def bad_batch_writes_nothing(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", chain("e", 2))
    before = await store.entries("s")
    return await _refused_and_unchanged(store, before, [msg("n1", "e1"), msg("n2", "n1"), msg("e0", "n2")])


async def batches_atomic_to_readers(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", [msg("root", None)])
    batch = chain("b", 5, "root")
    seen: list[int] = []

    async def reader() -> None:
        for _ in range(10):
            seen.append(len(await store.entries("s")))
            await asyncio.sleep(0)

    await asyncio.gather(store.append("s", batch), reader())
    torn = [n for n in seen if n not in (1, 6)]
    return f"a reader saw {torn[0] - 1} of a 5-entry batch" if torn else None


async def _appends_land(handles: list[MemoryLogStore]) -> str | None:
    await handles[0].append("s", [msg("root", None)])
    writers = [handles[i % len(handles)].append("s", chain(f"w{i}-", 2, "root")) for i in range(8)]
    await asyncio.gather(*writers)
    got = [e.id for e in await handles[0].entries("s")]
    want = {"root", *(f"w{i}-{j}" for i in range(8) for j in range(2))}
    lost = want - set(got)
    return f"lost {len(lost)} entries" if lost or len(got) != len(want) else None


async def concurrent_appends_land(cls: type[MemoryLogStore]) -> str | None:
    return await _appends_land([cls()])


async def replica_appends_land(cls: type[MemoryLogStore]) -> str | None:
    primary = cls()
    return await _appends_land([primary, primary.replica()])


async def conflicting_appends_one_lands(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", [msg("root", None)])
    outcomes = await asyncio.gather(store.append("s", [msg("same", "root")]),
                                    store.replica().append("s", [msg("same", "root")]), return_exceptions=True)
    got = [e.id for e in await store.entries("s")]
    if got.count("same") != 1 or sum(o is None for o in outcomes) != 1:
        return f"appends returned {outcomes}; the log is {got}"
    return None


async def racing_creates_one_wins(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    wins = await asyncio.gather(store.create("s", chain("a", 2)), store.replica().create("s", chain("b", 2)))
    got = [e.id for e in await store.entries("s")]
    if sorted(wins) != [False, True]:
        return f"create returned {wins}; the log is {got}"
    winner = ["a0", "a1"] if wins[0] else ["b0", "b1"]
    return None if got == winner else f"the log is {got}"


async def create_refuses_an_existing_session(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", [msg("a", None)])
    if await store.create("s", [msg("b", None)]):
        return "create returned True on a session with entries"
    got = [e.id for e in await store.entries("s")]
    return None if got == ["a"] else f"create wrote: {got}"


async def fork_into_existing_refused(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("src", chain("e", 2))
    await store.append("dst", [msg("z", None)])
    try:
        await fork(store, "src", "dst")
    except SessionExists:
        pass
    else:
        return "fork wrote into a session that had entries"
    return None if [e.id for e in await store.entries("dst")] == ["z"] else "dst changed"


async def fork_copies_the_path(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    log = [*chain("e", 4), msg("f", "e1"), msg("g", "f")]  # e0-e1-e2-e3 abandoned at e1
    await store.append("src", log)
    try:
        got = await fork(store, "src", "dst")
    except ValueError as exc:
        return f"fork refused: {exc}"
    want = path(log)
    stored = await store.entries("dst")
    return None if got == want == stored else f"fork copied {[e.id for e in stored]}"


async def replicas_see_appends(cls: type[MemoryLogStore]) -> str | None:
    a = cls()
    b = a.replica()
    await a.entries("s")
    await b.append("s", [msg("x", None)])
    got = [e.id for e in await a.entries("s")]
    return None if got == ["x"] else f"a replica read {got}"


async def append_order_kept(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    # Two replicas whose clocks are a minute apart: the reply is stamped earlier.
    sent = [msg("question", None, T0), msg("answer", "question", T0 - timedelta(minutes=1))]
    await store.append("s", sent[:1])
    await store.replica().append("s", sent[1:])
    got = await store.entries("s")
    return None if got == sent else f"order {[e.id for e in got]}"


async def read_list_is_a_copy(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("s", chain("e", 2))
    (await store.entries("s")).clear()
    got = [e.id for e in await store.entries("s")]
    return None if got == ["e0", "e1"] else f"clearing a read emptied the log: {got}"


async def sessions_isolated(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    await store.append("A", [msg("x", None)])
    got = await store.entries("a")
    return None if got == [] else "session 'a' read session 'A'"


async def compaction_removes_nothing(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    log = chain("e", 4)
    await store.append("s", log)
    c = await compact(store, "s", "summary of e0-e1", "e2", entry_id="c", created_at=T0)
    got = await store.entries("s")
    if got != [*log, c]:
        return f"after compaction the log is {[e.id for e in got]}"
    return None if model_view(got, "e1") == log[:2] else "branching before it lost entries"


async def escaped_entry_ids_kept(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    try:
        await store.append("s", [msg("%41", None), msg("A", None)])
    except ValueError as exc:
        return f"entries '%41' and 'A' refused as one id: {exc}"
    got = [e.id for e in await store.entries("s")]
    return None if got == ["%41", "A"] else f"entry ids came back as {got}"


async def long_logs_read_whole(cls: type[MemoryLogStore]) -> str | None:
    store = cls()
    log = [Entry.message(f"e{i}", None, T0, Message.text("user", "x" * 2**18)) for i in range(8)]
    await store.append("s", log)
    got = await store.entries("s")
    return None if got == log else f"{len(got)} of 8 entries of 256 KiB came back"


def _check(variant: type[MemoryLogStore]) -> Check:
    return {
        v.PercentDecodedIdsLogStore: escaped_entry_ids_kept,
        v.FirstPageOnlyLogStore: long_logs_read_whole,
        v.SecondsLogStore: times_kept_exactly,
        v.MillisecondsLogStore: times_kept_exactly,
        v.NaiveLocalTimeLogStore: times_kept_exactly,
        v.UtcOffsetLogStore: times_kept_exactly,
        v.JsonbCustomLogStore: custom_json_kept,
        v.MetaAsMessageLogStore: kinds_kept,
        v.ReusedIdsLogStore: duplicate_ids_refused,
        v.UpsertByIdLogStore: duplicate_ids_refused,
        v.OrphansLogStore: orphans_refused,
        v.OneEntryUncheckedLogStore: orphans_refused,
        v.HalfWrittenBatchLogStore: bad_batch_writes_nothing,
        v.EntryByEntryLogStore: batches_atomic_to_readers,
        v.GlobalIdsLogStore: fork_copies_the_path,
        v.StaleSnapshotLogStore: concurrent_appends_land,
        v.PerHandleLockLogStore: replica_appends_land,
        v.RacyCreateLogStore: racing_creates_one_wins,
        v.CreateAppendsLogStore: fork_into_existing_refused,
        v.StaleReplicaCacheLogStore: replicas_see_appends,
        v.SortedByTimeLogStore: append_order_kept,
        v.OwnListLogStore: read_list_is_a_copy,
        v.LowercasedSessionLogStore: sessions_isolated,
        v.ForkWholeTreeLogStore: fork_copies_the_path,
        v.CompactionPrunesLogStore: compaction_removes_nothing,
        v.UnlockedIdCheckLogStore: conflicting_appends_one_lands,
    }[variant]


CHECKS: list[Check] = list(dict.fromkeys(_check(cls) for _, cls, _ in v.VARIANTS))
EXTRA: list[Check] = [create_refuses_an_existing_session]


@pytest.mark.parametrize("check", CHECKS + EXTRA, ids=lambda c: c.__name__)
def test_the_memory_log_store_keeps(check: Check) -> None:
    assert asyncio.run(check(MemoryLogStore)) is None


@pytest.mark.parametrize(("name", "cls", "bug"), v.VARIANTS, ids=[n for n, _, _ in v.VARIANTS])
def test_the_broken_log_store_breaks_its_check(name: str, cls: type[MemoryLogStore], bug: str) -> None:
    """Each variant fails the check meant for it (and says how); the docstring names
    the bug and where it happens."""
    assert cls.__doc__ and "In the wild" in cls.__doc__, name
    problem = asyncio.run(_check(cls)(cls))
    assert problem is not None, f"{name} ({bug}) passed {_check(cls).__name__}"


def test_there_are_at_least_twelve_broken_log_stores() -> None:
    assert len(v.VARIANTS) >= 12
    assert len({cls for _, cls, _ in v.VARIANTS}) == len(v.VARIANTS)
    assert create_refuses_an_existing_session.__name__ and asyncio.run(
        create_refuses_an_existing_session(v.CreateAppendsLogStore)
    )


@pytest.mark.parametrize(
    ("cls", "clause", "diagnosis"),
    [
        (v.GlobalIdsLogStore, "log_sessions_are_isolated", "unique per session"),
        (v.CreateAppendsLogStore, "log_create_is_exclusive", "returned True, not False"),
        (v.ReusedIdsLogStore, "log_store_matches_model", "reused id was accepted"),
        (v.StaleReplicaCacheLogStore, "log_store_matches_model", "entries lost"),
    ],
    ids=lambda x: getattr(x, "__name__", str(x)),
)
def test_other_clauses_catch_these_too(cls: type[MemoryLogStore], clause: str, diagnosis: str) -> None:
    """Beyond the clause each is registered with (docs/log-stores.md's clause table relies on these)."""
    report = check(cls, lambda primary: primary.replica(), clauses=[clause], seed=1)
    (result,) = report.results
    assert result.outcome == "failed", result
    assert any(diagnosis in d for d in [result.diagnosis, *(x.diagnosis for x in result.violations)]), result


def test_a_plain_log_store_driven_from_threads_passes_every_log_clause() -> None:
    """The log clauses drive a store with plain methods from threads without a false
    alarm (the plain variants' control)."""
    log_clauses = [c.name for c in CLAUSES if "log" in c.needs and not c.reopen]  # crash clauses: opt-in
    report = check(v.PlainLogStore, lambda primary: primary.replica(), clauses=log_clauses, seed=3)
    assert [r.clause for r in report.results if r.outcome != "passed"] == [], str(report)


class _InFlight:
    """The most calls inside the store's methods at once, per session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most: dict[str, int] = defaultdict(int)

    @contextmanager
    def inside(self, session: str) -> Iterator[None]:
        with self.lock:
            self.now += 1
            self.most[session] = max(self.most[session], self.now)
        try:
            yield
        finally:
            with self.lock:
                self.now -= 1


class CountingLogStore(MemoryLogStore):
    """A correct async log store with a round trip (an await) in every method, counted."""

    def __init__(self, backend: MemoryLogBackend | None = None, counter: _InFlight | None = None) -> None:
        super().__init__(backend)
        self.counter = counter or _InFlight()

    def replica(self) -> CountingLogStore:
        return CountingLogStore(self.backend, self.counter)

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        with self.counter.inside(session):
            await asyncio.sleep(0)
            await super().append(session, entries)

    async def entries(self, session: str) -> list[Entry]:
        with self.counter.inside(session):
            await asyncio.sleep(0)
            return await super().entries(session)

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        with self.counter.inside(session):
            await asyncio.sleep(0)
            return await super().create(session, entries)


class CountingPlainLogStore(v.PlainLogStore):
    """The correct plain log store, counted."""

    def __init__(self, backend: MemoryLogBackend | None = None, lock: threading.Lock | None = None,
                 counter: _InFlight | None = None) -> None:
        super().__init__(backend, lock)
        self.counter = counter or _InFlight()

    def replica(self) -> CountingPlainLogStore:
        return CountingPlainLogStore(self.backend, self.lock, self.counter)

    def append(self, session: str, entries: Sequence[Entry]) -> None:
        with self.counter.inside(session):
            super().append(session, entries)

    def entries(self, session: str) -> list[Entry]:
        with self.counter.inside(session):
            return super().entries(session)

    def create(self, session: str, entries: Sequence[Entry]) -> bool:
        with self.counter.inside(session):
            return super().create(session, entries)


LOG_RACES = [c.name for c in CLAUSES if c.races and "log" in c.needs]


@pytest.mark.parametrize("store_class", [CountingLogStore, CountingPlainLogStore], ids=["async", "plain"])
@pytest.mark.parametrize("clause", LOG_RACES)
def test_log_races_overlap_their_callers(store_class: type, clause: str) -> None:
    """In most rounds of every log race, two or more calls were inside the store at once,
    for a correct async store and a correct plain store (a race that never overlaps
    proves nothing)."""
    first = store_class()
    report = check(lambda: first, lambda primary: primary.replica(), clauses=[clause], seed=11, profile=SIX_ROUNDS)
    assert report.results[0].outcome == "passed", report.results[0].details
    rounds = {s: n for s, n in first.counter.most.items()
              if any(k in s for k in ("log-race", "log-replicas", "log-atomic", "log-create-race", "log-conflict"))}
    overlapped = sum(n >= 2 for n in rounds.values())
    assert rounds, f"{clause} ran no rounds"
    assert overlapped > len(rounds) / 2, f"{clause}: only {overlapped} of {len(rounds)} rounds overlapped"
