"""Each projection held to a naive model written here (not to the implementation), on
generated logs; fork and compact run against an async and a plain store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_stores.memory_log import MemoryLogStore
from storetest._engine import strategies
from storetest.contract import Message
from storetest.entries import KINDS, Compaction, Custom, Entry, SessionExists
from storetest.projections import (
    compact,
    compact_sync,
    fork,
    fork_sync,
    leaf_id,
    model_view,
    of_kind,
    path,
    transcript_view,
)

T0 = datetime(2026, 5, 1, 12, 0, 0, 0, UTC)


# --- the naive models ------------------------------------------------------------------


def naive_path(log: Sequence[Entry], leaf: str) -> list[Entry]:
    """Walk up by scanning the whole log for each parent."""
    out: list[Entry] = []
    current: str | None = leaf
    while current is not None:
        entry = next(e for e in log if e.id == current)
        out.insert(0, entry)
        current = entry.parent_id
    return out


def naive_model(log: Sequence[Entry], leaf: str) -> list[Entry]:
    """Walk back from the leaf: what follows the first compaction met is read as is;
    before it, only from its first kept entry on; the compaction stands first."""
    after: list[Entry] = []
    before: list[Entry] = []
    compaction: Entry | None = None
    for entry in reversed(naive_path(log, leaf)):
        if compaction is None and entry.kind == "compaction":
            compaction = entry
        elif compaction is None:
            after.insert(0, entry)
        else:
            before.insert(0, entry)
    readable = ("message", "meta")
    if compaction is None:
        return [e for e in after if e.kind in readable]
    assert isinstance(compaction.payload, Compaction)
    kept: list[Entry] = []
    for i, entry in enumerate(before):
        if entry.id == compaction.payload.first_kept_id:
            kept = before[i:]
    return [compaction] + [e for e in kept + after if e.kind in readable]


def leaves_of(log: Sequence[Entry]) -> st.SearchStrategy[str]:
    return st.sampled_from([e.id for e in log])


nonempty_logs = strategies.logs(max_size=12, simple=True).filter(bool)


# --- the pure projections --------------------------------------------------------------


@given(strategies.logs(max_size=12, simple=True))
def test_the_leaf_is_the_last_entry_appended(log: list[Entry]) -> None:
    assert leaf_id(log) == (log[-1].id if log else None)


@given(nonempty_logs, st.data())
def test_path_matches_the_model(log: list[Entry], data: st.DataObject) -> None:
    leaf = data.draw(leaves_of(log))
    assert path(log, leaf) == naive_path(log, leaf)
    assert path(log) == naive_path(log, log[-1].id)


@given(nonempty_logs, st.data())
def test_model_view_matches_the_model(log: list[Entry], data: st.DataObject) -> None:
    leaf = data.draw(leaves_of(log))
    assert model_view(log, leaf) == naive_model(log, leaf)


@given(nonempty_logs, st.data())
def test_transcript_view_shows_messages_and_custom_only(log: list[Entry], data: st.DataObject) -> None:
    leaf = data.draw(leaves_of(log))
    want = [e for e in naive_path(log, leaf) if e.kind != "meta" and e.kind != "compaction"]
    assert transcript_view(log, leaf) == want


@given(strategies.logs(max_size=12, simple=True), st.sampled_from(KINDS))
def test_of_kind_filters(log: list[Entry], kind: str) -> None:
    assert of_kind(log, kind) == [e for e in log if e.kind == kind]  # type: ignore[arg-type]
    artifacts = [e for e in log if e.kind == "custom" and e.payload == Custom("artifact", e.payload.data)]  # type: ignore[union-attr]
    assert of_kind(log, "custom", "artifact") == artifacts


@given(nonempty_logs, st.data())
def test_branching_before_a_compaction_gives_the_uncompacted_path(
    log: list[Entry], data: st.DataObject
) -> None:
    """Any entry before the last compaction on a path, taken as the leaf, gives every
    message and meta entry of its path (unless an earlier compaction is on it)."""
    leaf = data.draw(leaves_of(log))
    line = path(log, leaf)
    compactions = [i for i, e in enumerate(line) if e.kind == "compaction"]
    if not compactions:
        return
    first = compactions[0]
    if first == 0:
        return
    before = line[first - 1].id
    assert model_view(log, before) == [e for e in line[:first] if e.kind in ("message", "meta")]


def test_a_compaction_example_reads_as_the_seed_says() -> None:
    """e1-e2-e3-e4, compaction keeping e3, then e5: the model reads summary, e3, e4, e5;
    branching from e2 reads e1, e2."""
    m = [Entry.message(f"e{i}", f"e{i - 1}" if i > 1 else None, T0, Message.text("user", str(i)))
         for i in range(1, 5)]
    c = Entry.compaction("c", "e4", T0, "summary of e1-e2", "e3")
    e5 = Entry.message("e5", "c", T0, Message.text("user", "5"))
    meta = Entry.meta("m", "e5", T0, Message.text("system", "note"))
    art = Entry.custom("a", "m", T0, "artifact", '{"b":1, "a":2}')
    log = [*m, c, e5, meta, art]
    assert [e.id for e in model_view(log)] == ["c", "e3", "e4", "e5", "m"]
    assert [e.id for e in transcript_view(log)] == ["e1", "e2", "e3", "e4", "e5", "a"]
    assert [e.id for e in model_view(log, "e2")] == ["e1", "e2"]


@pytest.mark.parametrize(
    ("log", "leaf", "words"),
    [
        ([Entry.message("a", "gone", T0, Message.text("user", "x"))], "a", "not in the log"),
        ([Entry.message("a", None, T0, Message.text("user", "x"))], "b", "no entry 'b'"),
        ([Entry.message("a", None, T0, Message.text("user", "x"))] * 2, "a", "twice"),
        ([Entry.message("a", "b", T0, Message.text("user", "x")),
          Entry.message("b", "a", T0, Message.text("user", "x"))], "a", "loop"),
    ],
)
def test_a_log_no_store_should_return_is_refused(log: list[Entry], leaf: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        path(log, leaf)


# --- fork and compact over a store, async and plain -----------------------------------


class PlainLogStore:
    """The memory log store behind plain methods (how a sync store looks)."""

    def __init__(self) -> None:
        self.inner = MemoryLogStore()

    def append(self, session: str, entries: Sequence[Entry]) -> None:
        asyncio.run(self.inner.append(session, entries))

    def entries(self, session: str) -> list[Entry]:
        return asyncio.run(self.inner.entries(session))

    def create(self, session: str, entries: Sequence[Entry]) -> bool:
        return asyncio.run(self.inner.create(session, entries))


def _fill(store: PlainLogStore, log: list[Entry]) -> None:
    store.append("src", log)


@settings(max_examples=40)
@given(nonempty_logs, st.data(), st.booleans())
def test_fork_copies_exactly_the_path(log: list[Entry], data: st.DataObject, plain: bool) -> None:
    leaf = data.draw(st.none() | leaves_of(log))
    store = PlainLogStore()
    _fill(store, log)
    want = naive_path(log, leaf if leaf is not None else log[-1].id)
    if plain:
        got = fork_sync(store, "src", "dst", leaf)
    else:
        got = asyncio.run(fork(store.inner, "src", "dst", leaf))
    assert got == want
    assert store.entries("dst") == want
    assert store.entries("src") == log


def test_fork_into_an_existing_session_writes_nothing() -> None:
    store = PlainLogStore()
    store.append("src", [Entry.message("a", None, T0, Message.text("user", "x"))])
    store.append("dst", [Entry.message("z", None, T0, Message.text("user", "y"))])
    before = store.entries("dst")
    with pytest.raises(SessionExists, match="'dst'"):
        fork_sync(store, "src", "dst")
    with pytest.raises(SessionExists, match="'dst'"):
        asyncio.run(fork(store.inner, "src", "dst"))
    assert store.entries("dst") == before
    with pytest.raises(ValueError, match="no entries to fork"):
        fork_sync(store, "nothing", "dst2")


def test_a_store_with_its_own_fork_is_used() -> None:
    calls: list[tuple[object, ...]] = []

    class NativeFork(MemoryLogStore):
        async def fork(self, session: str, new_session: str, leaf: str | None) -> bool:
            calls.append((session, new_session, leaf))
            return await self.create(new_session, path(await self.entries(session), leaf))

    store = NativeFork()
    asyncio.run(store.append("src", [Entry.message("a", None, T0, Message.text("user", "x"))]))
    assert asyncio.run(fork(store, "src", "dst")) == asyncio.run(store.entries("src"))
    assert calls == [("src", "dst", None)]
    with pytest.raises(SessionExists):
        asyncio.run(fork(store, "src", "dst"))


def test_fork_sync_refuses_an_async_store() -> None:
    with pytest.raises(TypeError, match="await fork"):
        fork_sync(MemoryLogStore(), "src", "dst")  # type: ignore[arg-type]


@settings(max_examples=40)
@given(nonempty_logs, st.data(), st.booleans())
def test_compact_removes_nothing_and_changes_what_the_model_reads(
    log: list[Entry], data: st.DataObject, plain: bool
) -> None:
    store = PlainLogStore()
    _fill(store, log)
    line = naive_path(log, log[-1].id)
    keep = data.draw(st.sampled_from([e.id for e in line]))
    when = T0 + timedelta(days=1)
    if plain:
        entry = compact_sync(store, "src", "summary", keep, entry_id="compaction-1", created_at=when)
    else:
        entry = asyncio.run(
            compact(store.inner, "src", "summary", keep, entry_id="compaction-1", created_at=when)
        )
    assert entry == Entry.compaction("compaction-1", log[-1].id, when, "summary", keep)
    assert store.entries("src") == [*log, entry]
    after = store.entries("src")
    assert model_view(after) == naive_model(after, "compaction-1")
    assert model_view(after)[0] == entry
    assert model_view(after, log[-1].id) == model_view(log)


def test_compact_refuses_a_kept_id_off_the_path() -> None:
    store = PlainLogStore()
    store.append("s", [Entry.message("a", None, T0, Message.text("user", "x")),
                       Entry.message("b", None, T0, Message.text("user", "y"))])
    with pytest.raises(ValueError, match="not on the active path"):
        compact_sync(store, "s", "sum", "a")
    assert len(store.entries("s")) == 2
    made = compact_sync(store, "s", "sum", "b")
    assert made.parent_id == "b" and made.created_at.utcoffset() == timedelta(0)
