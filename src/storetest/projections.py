"""What each reader sees of an entry log, and the two operations built from them.

The projections are pure functions over a session's entries (as a log store returns
them, in append order); no store is involved, so they are the same for every backend:

- :func:`path`: the entries from a root to a leaf, following parent pointers.
- :func:`leaf_id`: where a resumed session continues: the last entry appended (with
  two writers appending at once, the later one).
- :func:`model_view`: what the model reads: the path with the latest compaction on it
  applied (the compaction entry first, standing for its summary, then the kept
  entries), meta included, custom records excluded.
- :func:`transcript_view`: what a transcript shows: messages and custom records on the
  path, in order; no meta, no compaction.
- :func:`of_kind`: the entries of one kind (and one custom application kind).

:func:`fork` and :func:`compact` are operations over a log store, async or plain. Each
is written once, as a sequence of store calls (:class:`_Call`), and run by one of two
drivers: :func:`fork`/:func:`compact` await (and accept either kind of store),
:func:`fork_sync`/:func:`compact_sync` call a plain store directly.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from storetest.contract import check_session_id
from storetest.entries import (
    Compaction,
    Custom,
    Entry,
    EntryKind,
    LogStore,
    SessionExists,
    SyncLogStore,
    check_entry_id,
)

__all__ = [
    "compact",
    "compact_sync",
    "fork",
    "fork_sync",
    "leaf_id",
    "model_view",
    "of_kind",
    "path",
    "transcript_view",
]

T = TypeVar("T")


def _by_id(entries: Sequence[Entry]) -> dict[str, Entry]:
    index: dict[str, Entry] = {}
    for entry in entries:
        if entry.id in index:
            raise ValueError(f"entry id {entry.id!r} appears twice in the log")
        index[entry.id] = entry
    return index


def leaf_id(entries: Sequence[Entry]) -> str | None:
    """The id a resumed session continues from: the last entry appended, or ``None``
    for an empty log."""
    return entries[-1].id if entries else None


def path(entries: Sequence[Entry], leaf: str | None = None) -> list[Entry]:
    """The entries from a root to ``leaf`` (by default :func:`leaf_id`), root first.

    :raises ValueError: ``leaf`` is not in the log, an id appears twice, a parent is
        missing, or the parent pointers loop: a log no correct store returns.
    """
    index = _by_id(entries)
    if leaf is None:
        leaf = leaf_id(entries)
        if leaf is None:
            return []
    if leaf not in index:
        raise ValueError(f"no entry {leaf!r} in the log")
    out: list[Entry] = []
    current: str | None = leaf
    while current is not None:
        entry = index.get(current)
        if entry is None:
            raise ValueError(f"entry {out[-1].id!r} has parent {current!r}, which is not in the log")
        if len(out) > len(index):
            raise ValueError(f"the parent pointers from {leaf!r} loop")
        out.append(entry)
        current = entry.parent_id
    out.reverse()
    return out


def model_view(entries: Sequence[Entry], leaf: str | None = None) -> list[Entry]:
    """What the model reads, continuing from ``leaf`` (by default :func:`leaf_id`).

    Without a compaction on the path: its message and meta entries. With one, the
    latest compaction on the path comes first (the caller turns its summary into a
    message), then the message and meta entries from its ``first_kept_id`` up to it,
    then those after it. If ``first_kept_id`` is not on the path before the compaction,
    nothing before the compaction is kept. Custom records are never included, nor any
    earlier compaction.
    """
    line = path(entries, leaf)
    compactions = [i for i, e in enumerate(line) if e.kind == "compaction"]
    if not compactions:
        return [e for e in line if e.kind in ("message", "meta")]
    at = compactions[-1]
    summary = line[at]
    assert isinstance(summary.payload, Compaction)
    before = [e.id for e in line[:at]]
    start = before.index(summary.payload.first_kept_id) if summary.payload.first_kept_id in before else at
    kept = line[start:at] + line[at + 1 :]
    return [summary, *(e for e in kept if e.kind in ("message", "meta"))]


def transcript_view(entries: Sequence[Entry], leaf: str | None = None) -> list[Entry]:
    """What a transcript shows of the path to ``leaf``: message and custom entries, in
    order. Meta entries and compactions are hidden; a compaction hides nothing here."""
    return [e for e in path(entries, leaf) if e.kind in ("message", "custom")]


def of_kind(entries: Sequence[Entry], kind: EntryKind, custom_kind: str | None = None) -> list[Entry]:
    """The entries of ``kind``, in order; for ``"custom"``, only the application's
    ``custom_kind`` when given (``of_kind(log, "custom", "artifact")``).

    :raises ValueError: ``custom_kind`` given with a kind other than ``"custom"``.
    """
    if custom_kind is not None and kind != "custom":
        raise ValueError(f"custom_kind applies to custom entries, not {kind!r}")
    return [
        e for e in entries
        if e.kind == kind
        and (custom_kind is None or (isinstance(e.payload, Custom) and e.payload.kind == custom_kind))
    ]


# --- operations over a store: one plan each, two drivers -------------------------------


@dataclass(frozen=True)
class _Call:
    """One store method call a plan asks its driver to make."""

    method: str
    args: tuple[object, ...]


_Plan = Generator[_Call, Any, T]


def _fork_plan(store: object, session: str, new_session: str, leaf: str | None) -> _Plan[list[Entry]]:
    session = check_session_id(session)
    new_session = check_session_id(new_session)
    if leaf is not None:
        check_entry_id(leaf, "leaf")
    if new_session == session:
        raise ValueError(f"cannot fork session {session!r} into itself")
    if callable(getattr(store, "fork", None)):
        if not (yield _Call("fork", (session, new_session, leaf))):
            raise SessionExists(f"cannot fork into session {new_session!r}: it already has entries")
        copied: list[Entry] = yield _Call("entries", (new_session,))
        return copied
    log: list[Entry] = yield _Call("entries", (session,))
    if not log:
        raise ValueError(f"session {session!r} has no entries to fork")
    line = path(log, leaf)
    if not (yield _Call("create", (new_session, line))):
        raise SessionExists(f"cannot fork into session {new_session!r}: it already has entries")
    return line


def _compact_plan(
    session: str, summary: str, first_kept_id: str, entry_id: str | None, created_at: datetime | None
) -> _Plan[Entry]:
    session = check_session_id(session)
    log: list[Entry] = yield _Call("entries", (session,))
    line = path(log)
    if first_kept_id not in {e.id for e in line}:
        raise ValueError(
            f"session {session!r}: first_kept_id {first_kept_id!r} is not on the active path"
        )
    entry = Entry.compaction(
        entry_id if entry_id is not None else uuid.uuid4().hex,
        leaf_id(log),
        created_at if created_at is not None else datetime.now(UTC),
        summary,
        first_kept_id,
    )
    yield _Call("append", (session, [entry]))
    return entry


async def _run_async(store: object, plan: _Plan[T]) -> T:
    """Drive a plan against an async or a plain store."""
    result: Any = None
    try:
        while True:
            call = plan.send(result)
            result = getattr(store, call.method)(*call.args)
            if inspect.isawaitable(result):
                result = await result
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _run_sync(store: object, plan: _Plan[T]) -> T:
    """Drive a plan against a plain store."""
    result: Any = None
    try:
        while True:
            call = plan.send(result)
            result = getattr(store, call.method)(*call.args)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError(
                    f"{type(store).__name__}.{call.method} is async; await fork() or compact() "
                    "instead of calling fork_sync() or compact_sync()"
                )
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def fork(
    store: LogStore | SyncLogStore, session: str, new_session: str, leaf: str | None = None
) -> list[Entry]:
    """Copy the path from a root to ``leaf`` (default: the session's leaf) into
    ``new_session``, which must not exist, with one ``create``; return what was copied.

    Uses the store's own ``fork`` when it has one.

    :raises SessionExists: ``new_session`` already has entries (nothing written).
    :raises ValueError: the session is empty, ``leaf`` is not in it, or the ids are bad.
    """
    return await _run_async(store, _fork_plan(store, session, new_session, leaf))


def fork_sync(store: SyncLogStore, session: str, new_session: str, leaf: str | None = None) -> list[Entry]:
    """:func:`fork` for a store with plain methods."""
    return _run_sync(store, _fork_plan(store, session, new_session, leaf))


async def compact(
    store: LogStore | SyncLogStore,
    session: str,
    summary: str,
    first_kept_id: str,
    *,
    entry_id: str | None = None,
    created_at: datetime | None = None,
) -> Entry:
    """Append a compaction to the session's leaf: the model will read ``summary``, then
    the path from ``first_kept_id`` on. Removes nothing; returns the entry appended.

    ``entry_id`` defaults to a random UUID, ``created_at`` to now (UTC).

    :raises ValueError: ``first_kept_id`` is not on the active path.
    """
    return await _run_async(store, _compact_plan(session, summary, first_kept_id, entry_id, created_at))


def compact_sync(
    store: SyncLogStore,
    session: str,
    summary: str,
    first_kept_id: str,
    *,
    entry_id: str | None = None,
    created_at: datetime | None = None,
) -> Entry:
    """:func:`compact` for a store with plain methods."""
    return _run_sync(store, _compact_plan(session, summary, first_kept_id, entry_id, created_at))
