"""What the entry-log clause modules share: a handle with the log methods, entries to
write, and reads that record what the store raised."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from storetest._engine import strategies
from storetest._engine.diagnosis import describe_id_merge, describe_log
from storetest._engine.failures import RAISED, Check
from storetest._engine.harness import Handle, Target
from storetest.contract import MAX_ID_BYTES, MAX_NAME_BYTES, Message, Text, ToolCall, ToolResult
from storetest.entries import Entry

__all__ = ["LogHandle", "log_handle"]

T0 = datetime(2026, 5, 1, 9, 30, 0, 250001, timezone(timedelta(hours=2)))
_NEEDS = ("log",)


class LogHandle:
    """A store handle seen as a log store, for :mod:`storetest.projections` (which
    uses a native ``fork`` only when the store has one: see :func:`log_handle`)."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        await self.handle.call("append", session, entries)

    async def entries(self, session: str) -> list[Entry]:
        return await self.handle.call("entries", session)  # type: ignore[no-any-return]

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        return await self.handle.call("create", session, entries)  # type: ignore[no-any-return]


class _NativeForkHandle(LogHandle):
    async def fork(self, session: str, new_session: str, leaf: str | None) -> bool:
        return await self.handle.call("fork", session, new_session, leaf)  # type: ignore[no-any-return]


def log_handle(handle: Handle) -> LogHandle:
    return _NativeForkHandle(handle) if callable(getattr(handle.raw, "fork", None)) else LogHandle(handle)


def _msg(entry_id: str, parent: str | None, when: datetime = T0, text: str | None = None) -> Entry:
    return Entry.message(entry_id, parent, when, Message.text("user", text if text is not None else entry_id))


def _chain(prefix: str, n: int, parent: str | None = None, when: datetime = T0) -> list[Entry]:
    out: list[Entry] = []
    for i in range(n):
        out.append(_msg(f"{prefix}{i}", parent, when + timedelta(seconds=i)))
        parent = out[-1].id
    return out


def _id(entry: object) -> object:
    return entry.id if isinstance(entry, Entry) else entry


def _ids(entries: object) -> object:
    return [e.id for e in entries if isinstance(e, Entry)] if isinstance(entries, list) else entries


def _expect_log(check: Check, session: str, sent: Sequence[Entry], got: object, what: str = "",
                expected: bool = False) -> bool:
    """Record a violation unless ``got`` (from ``entries()``) is exactly ``sent``;
    ``expected``: ``sent`` is what the log should hold (a model's), not what was appended."""
    if got is RAISED:
        return False
    if not isinstance(got, list):
        check.add(session, f"entries() returned {type(got).__name__}, not a list", got=got)
        return False
    if got != list(sent):
        check.differs(session, what + describe_log(sent, got), _ids(list(sent)), _ids(got), expected)
        return False
    return True


def _read(check: Check, t: Target, session: str, handle: Handle | None = None) -> Any:
    h = handle or t.store
    return check.call(session, f"entries() through the {h.label}", h.call("entries", session))


def _expect_apart(check: Check, t: Target, ids: Sequence[str], skip: set[str]) -> None:
    """Each session of ``ids`` (but ``skip``, the refused) holds the one entry appended to
    it, ``appended to session #i``; one holding another's is named as sessions merged."""
    owner = {f"appended to session #{i}": i for i in range(len(ids))}
    for i, session in enumerate(ids):
        if session in skip:
            continue
        want = [_msg(f"entry-{i}", None, text=f"appended to session #{i}")]
        got = _read(check, t, session)
        if got is RAISED or got == want:
            continue
        texts = [part.text for e in got if isinstance(e, Entry) and isinstance(e.payload, Message)
                 for part in e.payload.content if isinstance(part, Text)] if isinstance(got, list) else []
        others = [owner[x] for x in texts if x in owner and owner[x] != i]
        if others:
            check.add(session, f"sessions merged: reading {session!r} gave the entries appended to "
                      f"{ids[others[0]]!r}: " + describe_id_merge(session, ids[others[0]]))
        else:
            _expect_log(check, session, want, got)


# --- what goes in comes out ------------------------------------------------------------


def _round_trip_corpus() -> list[Entry]:
    times = [Entry.message(f"time-{i}", None, when, Message.text("user", f"time #{i}"))
             for i, when in enumerate(strategies.NASTY_TIMES)]
    customs = [Entry.custom(f"custom-{i}", None, T0, "artifact", data)
               for i, data in enumerate(strategies.NASTY_JSON)]
    customs += [Entry.custom(f"custom-kind-{i}", None, T0, kind, "{}")
                for i, kind in enumerate(["Artifact", "artifact ", "x\u0301", "ui/state"])]
    texts = [Entry.message(f"text-{i}", None, T0, Message("assistant", (
        Text(text), ToolCall(f"call-{i}", "lookup", '{"q": 1}'), ToolResult(f"call-{i}", text))))
        for i, text in enumerate(strategies.NASTY_TEXTS)]
    attachments = [Entry.message(f"attachment-{i}", None, T0, Message("user", (a,)))
                   for i, a in enumerate(strategies.NASTY_ATTACHMENTS)]
    # Short fields at their limits; custom data large (it has no limit).
    long_id = strategies.filled("id-", MAX_ID_BYTES)
    limits = [
        Entry.custom(long_id, None, T0, strategies.filled("Kind ", MAX_NAME_BYTES),
                     '{"blob": "' + "é x\\n" * 2**15 + '", "z": 1, "a": 2}'),
        Entry.message("child-of-a-long-id", long_id, T0, Message.text("user", "child")),
        Entry.compaction("compaction-of-a-long-id", None, T0, "kept from a long id", long_id),
    ]
    kinds = [
        Entry.meta("meta-1", "text-1", T0, Message.text("system", "a reminder the transcript hides")),
        Entry.compaction("compaction-1", "meta-1", T0, "a summary\x00 with \r\n odd text 👍🏽", "text-0"),
        Entry.message("after-compaction", "compaction-1", T0, Message.text("user", "after")),
    ]
    return [*times, *customs, *texts, *attachments, *limits, *kinds]
