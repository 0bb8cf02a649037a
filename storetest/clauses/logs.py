"""Entry logs (:mod:`storetest.entries`): entries come back exactly and in append order,
bad batches are refused whole, creates are exclusive, concurrent appends all land,
sessions never mix, and fork and compaction work over what the store keeps.

Real bugs behind these clauses: a log kept as one document rewritten from a stale
snapshot (a concurrent writer's entries vanish); ``INSERT``s in autocommit (half a
batch lands, or a reader sees half of one); no ``UNIQUE (session, id)`` or an ``INSERT
OR REPLACE``; a ``parent_id`` with no check; ``DATETIME`` without fractions, BSON dates
(milliseconds), ``timestamptz`` (the offset lost) and naive local time; custom JSON in a
``jsonb`` column; ``ORDER BY created_at`` with two replicas' clocks apart; ``SELECT
count(*)`` then ``INSERT`` for a create; ``PRIMARY KEY (id)`` across sessions (a fork
cannot copy ids); a fork that copies the whole tree; a compaction that deletes.

These clauses run when the store has ``append``, ``entries`` and ``create`` (the
``log`` capability); an optional ``fork`` is used by the fork clause when present.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from hypothesis import note, seed
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from storetest import strategies
from storetest._harness import Handle, Target
from storetest.clauses._registry import clause
from storetest.clauses._support import examples, hypothesis_settings
from storetest.clauses.transcripts import confusable_ids
from storetest.contract import Message, Text, ToolCall, ToolResult
from storetest.diagnosis import describe_entry, describe_id_merge, describe_log
from storetest.entries import Entry, SessionExists
from storetest.failures import RAISED, Check, checking, describe_exception
from storetest.projections import compact, fork, model_view, path

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


def _expect_log(check: Check, session: str, sent: Sequence[Entry], got: object, what: str = "") -> bool:
    """Record a violation unless ``got`` (from ``entries()``) is exactly ``sent``."""
    if got is RAISED:
        return False
    if not isinstance(got, list):
        check.add(session, f"entries() returned {type(got).__name__}, not a list", got=got)
        return False
    if got != list(sent):
        check.add(session, what + describe_log(sent, got), _ids(list(sent)), _ids(got))
        return False
    return True


def _read(check: Check, t: Target, session: str, handle: Handle | None = None) -> Any:
    h = handle or t.store
    return check.call(session, f"entries() through the {h.label}", h.call("entries", session))


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
    kinds = [
        Entry.meta("meta-1", "text-1", T0, Message.text("system", "a reminder the transcript hides")),
        Entry.compaction("compaction-1", "meta-1", T0, "a summary\x00 with \r\n odd text 👍🏽", "text-0"),
        Entry.message("after-compaction", "compaction-1", T0, Message.text("user", "after")),
    ]
    return [*times, *customs, *texts, *attachments, *kinds]


@clause(needs=_NEEDS)
def log_entries_round_trip_exactly(t: Target) -> None:
    """Appended entries come back equal, every kind and field: ids, parents, kinds,
    messages byte for byte, custom JSON text byte for byte, creation times to the
    microsecond with their UTC offset.

    Catches times truncated to seconds (``DATETIME``) or milliseconds (BSON, JavaScript
    dates), the offset lost (``timestamptz``) or the time shifted (naive local time),
    custom data in a ``jsonb``/``JSON`` column, meta entries stored as messages.
    """
    corpus = _round_trip_corpus()
    with checking(log_entries_round_trip_exactly, t.run) as check:
        session = t.new_session("log-roundtrip")
        if check.call(session, f"append of {len(corpus)} entries", t.store.call("append", session, corpus)) \
                is RAISED:
            for i, entry in enumerate(corpus):  # find the entries the store refuses
                one = f"{session}/{i}"
                single = [Entry(entry.id, None, entry.created_at, entry.kind, entry.payload)]
                if check.call(one, f"append of entry {entry.id!r}", t.store.call("append", one, single)) \
                        is not RAISED:
                    _expect_log(check, one, single, _read(check, t, one))
            return
        got = _read(check, t, session)
        if isinstance(got, list) and len(got) == len(corpus):
            for sent, back in zip(corpus, got, strict=True):
                if sent != back:
                    check.add(session, describe_entry(sent, back), sent, back)
        else:
            _expect_log(check, session, corpus, got)

    @examples(t, strategies.logs(max_size=8))
    def example(log: list[Entry]) -> None:
        session = t.new_session("log-roundtrip")
        note(f"session {session!r}")
        with checking(log_entries_round_trip_exactly, t.run) as check:
            if check.call(session, "append()", t.store.call("append", session, log)) is not RAISED:
                _expect_log(check, session, log, _read(check, t, session))

    example()


@clause(needs=_NEEDS)
def log_append_order_is_kept(t: Target) -> None:
    """Entries come back in the order they were appended, batch after batch, and an
    entry once appended never changes or disappears, whatever a caller does with a list
    it was given.

    Appends here carry times that go backwards (two replicas' clocks a minute apart)
    and branch. Catches ``ORDER BY created_at`` (or a time-sorted key) instead of a
    sequence, a read without ``ORDER BY``, and a store whose ``entries()`` hands out
    its own list.
    """
    session = t.new_session("log-order")
    batches = [
        _chain("q", 2),
        [_msg("late-clock", "q1", T0 - timedelta(minutes=1))],
        [_msg("branch", "q0", T0 - timedelta(minutes=2)), _msg("branch-reply", "branch", T0 + timedelta(hours=1))],
        [_msg("same-time-b", "late-clock", T0), _msg("same-time-a", "late-clock", T0)],
        [_msg("root-2", None, T0 - timedelta(days=1))],
    ]
    with checking(log_append_order_is_kept, t.run) as check:
        appended: list[Entry] = []
        for n, batch in enumerate(batches, start=1):
            if check.call(session, f"append #{n}", t.store.call("append", session, batch)) is RAISED:
                return
            appended += batch
            if not _expect_log(check, session, appended, _read(check, t, session), f"after append #{n}: "):
                return
        got = _read(check, t, session)
        if isinstance(got, list):
            got.clear()
            got.append(_msg("caller-added", None))
            after = _read(check, t, session)
            if isinstance(after, list) and after != appended:
                check.add(session, "entries() returned the store's own list: the caller clearing it "
                          "changed the log (return a copy)", _ids(appended), _ids(after))


@clause(needs=_NEEDS)
def log_bad_batches_are_refused_whole(t: Target) -> None:
    """A batch with an id already in the session or twice in the batch, or with a
    parent neither in the session nor earlier in the batch, is refused with
    ``ValueError``, and nothing of it is written, even the good entries before the bad one.

    Catches a log with no ``UNIQUE (session, id)`` (the id stored twice), ``INSERT OR
    REPLACE`` / upserts (the earlier entry replaced), a ``parent_id`` never checked
    (orphans accepted), and entries checked and inserted one by one in autocommit (the
    good part of a refused batch lands).
    """
    session = t.new_session("log-refuse")
    elsewhere = t.new_session("log-elsewhere")
    base = _chain("e", 4)
    bad: list[tuple[str, list[Entry]]] = [
        ("an id already in the session", [_msg("new-0", "e3"), _msg("e1", "new-0", text="reused id")]),
        ("an id twice in the batch", [_msg("new-1", "e3"), _msg("new-1", "e3", text="twice")]),
        ("a parent in no session", [_msg("new-2", "e3"), _msg("new-3", "ghost")]),
        ("a parent that comes later in the batch", [_msg("new-4", "new-5"), _msg("new-5", "e3")]),
        ("a parent that is in another session only", [_msg("new-6", "e3"), _msg("new-7", "far-away")]),
    ]
    with checking(log_bad_batches_are_refused_whole, t.run) as check:
        for label, work in (("append", t.store.call("append", session, base)),
                            ("append", t.store.call("append", elsewhere, [_msg("far-away", None)]))):
            if check.call(session, label, work) is RAISED:
                return
        for what, batch in bad:
            _refused(check, t, session, base, what, batch)
        fresh = t.new_session("log-refuse-create")
        try:
            result = t.run(t.store.call("create", fresh, [_msg("x", "ghost")]))
        except ValueError:
            result = RAISED
        except Exception as exc:
            check.add(fresh, f"create() with an orphan raised {describe_exception(exc)}, not ValueError")
            result = RAISED
        if result is not RAISED:
            check.add(fresh, "create() accepted an entry whose parent is in no session (an orphan)")
        _expect_log(check, fresh, [], _read(check, t, fresh), "after a refused create: ")


def _refused(check: Check, t: Target, session: str, before: list[Entry], what: str, batch: list[Entry]) -> None:
    try:
        t.run(t.store.call("append", session, batch))
    except ValueError:
        refused = True
    except Exception as exc:
        check.add(session, f"a batch with {what} raised {describe_exception(exc)}, not ValueError")
        refused = True
    else:
        refused = False
    got = _read(check, t, session)
    if got is RAISED or not isinstance(got, list):
        return
    ids = [e.id for e in got if isinstance(e, Entry)]
    if got == before:
        if not refused:
            check.add(session, f"a batch with {what} was accepted without an error (and not written)")
        return
    landed = [e for e in batch if e in got]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    replaced = [e for e in before if e not in got and e.id in ids]
    if not refused and dup:
        check.add(session, f"a reused entry id was accepted and stored twice ({what}: {dup[0]!r}); "
                  "entry ids are unique within a session", _ids(before + batch), ids)
    elif not refused and replaced:
        check.add(session, f"a reused entry id replaced the earlier entry {replaced[0].id!r} ({what}): "
                  "an upsert where an insert must fail", _ids(before + batch), ids)
    elif not refused and "parent" in what:
        check.add(session, f"an orphan was accepted: a batch with {what} was written", _ids(before + batch), ids)
    elif not refused:
        check.add(session, f"a batch with {what} was accepted", _ids(before + batch), ids)
    else:
        check.add(session, f"the refused batch was partly written: {len(landed)} of its {len(batch)} "
                  f"entries landed ({what}); check the whole batch, then write it in one transaction",
                  _ids(before), ids)
    # Carry on from what the store now holds, so one bad batch does not hide the next.
    before[:] = [e for e in got if isinstance(e, Entry)]


# --- concurrency -----------------------------------------------------------------------


def _race_appends(t: Target, handles: Sequence[Handle], session: str, writers: int = 6,
                  batches: int = 3) -> tuple[list[Entry], list[list[Entry]], list[str]]:
    """Writers started together, each appending ``batches`` batches of two entries in a
    row (its own chain under a shared root). Returns the root plus every acknowledged
    batch, each writer's acknowledged entries in order, and the errors raised."""
    root = _msg("root", None)
    t.run(handles[0].call("append", session, [root]))
    acked: list[list[Entry]] = [[] for _ in range(writers)]
    errors: list[str] = []

    def writer(w: int) -> Callable[[], Awaitable[None]]:
        handle = handles[w % len(handles)]

        async def run() -> None:
            parent = "root"
            for b in range(batches):
                batch = _chain(f"w{w}-b{b}-", 2, parent, T0 + timedelta(minutes=w))
                try:
                    await handle.call("append", session, batch)
                except Exception as exc:
                    errors.append(f"writer {w} through the {handle.label}: {describe_exception(exc)}")
                    return
                acked[w] += batch
                parent = batch[-1].id

        return run

    calls = [writer(w) for w in range(writers)]
    t.rng.shuffle(calls)
    t.race(calls)
    return [root], acked, errors


def _account(check: Check, session: str, root: list[Entry], acked: list[list[Entry]],
             errors: list[str], got: object) -> None:
    """Every acknowledged entry exactly once, nothing else, each writer's in order."""
    if got is RAISED:
        return
    if not isinstance(got, list):
        check.add(session, f"entries() returned {type(got).__name__}, not a list", got=got)
        return
    want = [*root, *(e for w in acked for e in w)]
    have = Counter(e.id for e in got if isinstance(e, Entry))
    lost = [e.id for e in want if have[e.id] == 0]
    duplicated = [i for i, n in have.items() if n > 1]
    unexpected = [i for i in have if i not in {e.id for e in want}]
    if lost or duplicated or unexpected:
        why = ("a writer appended to a stale copy of the log and overwrote the others' entries "
               "(read-modify-write with no lock or version check)" if lost else "")
        check.add(
            session,
            f"{len(lost)} entries lost, {len(duplicated)} duplicated, {len(unexpected)} unexpected "
            f"[lost={len(lost)} duplicated={len(duplicated)} unexpected={len(unexpected)} of "
            f"{len(want)} acknowledged]" + (f": {why}" if why else ""),
            sent=f"{len(want)} entries, e.g. lost {lost[:4]}" if lost else f"{len(want)} entries",
            got=_ids(got),
        )
    position = {e.id: i for i, e in enumerate(got) if isinstance(e, Entry)}
    for w, entries in enumerate(acked):
        order = [position[e.id] for e in entries if e.id in position]
        if order != sorted(order):
            check.add(session, f"writer {w}'s entries came back out of the order it appended them",
                      _ids(entries), _ids(got))
    for error in errors[:3]:
        check.add(session, f"a concurrent append raised: {error}")


@clause(needs=_NEEDS, races=True)
def log_concurrent_appends_all_land(t: Target) -> None:
    """Many writers appending to one session at once all land: every acknowledged
    entry is there exactly once, each writer's in its order (lost = duplicated =
    unexpected = 0).

    Writers start together (tasks for an async store, threads for a plain one), round
    after round. Catches a log kept as one document or file rewritten from a stale
    snapshot (read, append in memory, write back), the classic lost update.
    """
    with checking(log_concurrent_appends_all_land, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            session = t.new_session(f"log-race{round_}")
            root, acked, errors = _race_appends(t, [t.store], session)
            _account(check, session, root, acked, errors, _read(check, t, session))
            if check.violations:
                return


@clause(needs=_NEEDS, replica=True, races=True)
def log_appends_land_across_replicas(t: Target) -> None:
    """Writers on two handles of one backend, appending to one session at once, all
    land exactly once, in each writer's order.

    Catches a lock that only holds within one handle or process (``asyncio.Lock``,
    ``threading.Lock``, ``flock`` on a per-host file) around a read-modify-write.
    """
    assert t.replica is not None
    with checking(log_appends_land_across_replicas, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            session = t.new_session(f"log-replicas{round_}")
            root, acked, errors = _race_appends(t, [t.store, t.replica], session)
            _account(check, session, root, acked, errors, _read(check, t, session))
            if check.violations:
                return


@clause(needs=_NEEDS, races=True)
def log_batches_are_atomic(t: Target) -> None:
    """A batch is seen whole or not at all: readers racing with writers never see part
    of a batch, and two writers' batches never interleave.

    Catches a batch written one entry per command (``RPUSH`` per entry, ``INSERT``s in
    autocommit, a JSONL writer flushing line by line) with no transaction around it.
    """
    with checking(log_batches_are_atomic, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            _atomic_round(t, check, t.new_session(f"log-atomic{round_}"))
            if check.violations:
                return


def _atomic_round(t: Target, check: Check, session: str, size: int = 4) -> None:
    """Three writers (a batch each) and three readers (``size`` reads each) at once."""
    t.run(t.store.call("append", session, [_msg("root", None)]))
    batches = [_chain(f"b{w}-", size, "root") for w in range(3)]
    seen: list[list[str]] = []

    def writer(batch: list[Entry]) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await t.store.call("append", session, batch)
        return run

    async def reader() -> None:
        for _ in range(size):
            got = await t.store.call("entries", session)
            seen.append([e.id for e in got if isinstance(e, Entry)])
            await asyncio.sleep(0)  # let the writers on between reads

    calls = [writer(b) for b in batches] + [reader] * 3
    t.rng.shuffle(calls)
    try:
        t.race(calls)
    except Exception as exc:
        check.add(session, f"a racing append or read raised {describe_exception(exc)}")
        return
    final = _read(check, t, session)
    if not isinstance(final, list):
        return
    for ids in [*seen, [e.id for e in final if isinstance(e, Entry)]]:
        for batch in batches:
            mine = {e.id for e in batch}
            have = [i for i in ids if i in mine]
            if have and len(have) != size:
                check.add(session, f"a reader saw {len(have)} of a {size}-entry batch: the batch is "
                          "written entry by entry, not in one transaction", _ids(batch), ids)
                return
            if have and ids.index(have[-1]) - ids.index(have[0]) != size - 1:
                check.add(session, "two batches interleaved: a batch's entries are not contiguous in "
                          "append order (each batch written entry by entry, not in one transaction)",
                          _ids(batch), ids)
                return


@clause(needs=_NEEDS)
def log_create_is_exclusive(t: Target) -> None:
    """``create`` writes only into a session with no entries and returns ``True``; on
    a session that has entries it returns ``False`` and writes nothing.

    Catches ``create`` written as ``append`` (a fork then lands inside an existing
    conversation), and ``open(path, "a")`` where ``"x"`` was meant.
    """
    session = t.new_session("log-create")
    first, second = _chain("c", 2), _chain("d", 2)
    with checking(log_create_is_exclusive, t.run) as check:
        made = check.call(session, "create() of a new session", t.store.call("create", session, first))
        if made is not RAISED and made is not True:
            check.add(session, f"create() of a new session returned {made!r}, not True")
        _expect_log(check, session, first, _read(check, t, session), "after create: ")
        again = check.call(session, "create() again", t.store.call("create", session, second))
        if again is not RAISED and again is not False:
            check.add(session, f"create() on a session that has entries returned {again!r}, not False "
                      "(it must write only into an empty session)")
        _expect_log(check, session, first, _read(check, t, session), "after a second create: ")
        used = t.new_session("log-create-appended")
        if check.call(used, "append()", t.store.call("append", used, [_msg("a", None)])) is RAISED:
            return
        made = check.call(used, "create()", t.store.call("create", used, second))
        if made is not RAISED and made is not False:
            check.add(used, f"create() on a session made by append returned {made!r}, not False")
        _expect_log(check, used, [_msg("a", None)], _read(check, t, used), "after create on it: ")


@clause(needs=_NEEDS, races=True)
def log_racing_creates_have_one_winner(t: Target) -> None:
    """Of several creates of one session started at once (through every handle), exactly
    one returns ``True``, and the session holds exactly its batch.

    Catches a create that checks the session is empty, then inserts in a second
    command (``SELECT count(*)`` then ``INSERT`` with no unique constraint;
    ``os.path.exists`` then ``open(path, "w")``).
    """
    with checking(log_racing_creates_have_one_winner, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            _create_round(t, check, t.new_session(f"log-create-race{round_}"))
            if check.violations:
                return


def _create_round(t: Target, check: Check, session: str, creators: int = 4) -> None:
    handles = t.handles()
    batches = [_chain(f"creator{k}-", 2) for k in range(creators)]

    def creator(k: int) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            return await handles[k % len(handles)].call("create", session, batches[k])
        return run

    try:
        wins = t.race([creator(k) for k in range(creators)])
    except Exception as exc:
        check.add(session, f"a racing create raised {describe_exception(exc)}")
        return
    got = _read(check, t, session)
    winners = [k for k, won in enumerate(wins) if won is True]
    if len(winners) != 1:
        check.add(session, f"{len(winners)} of {creators} racing creates returned True (exactly one "
                  "must win: check and insert in one step)", wins, _ids(got))
        return
    _expect_log(check, session, batches[winners[0]], got, "after racing creates: ")


# --- sessions and replicas ---------------------------------------------------------------


@clause(needs=_NEEDS)
def log_sessions_are_isolated(t: Target) -> None:
    """Sessions never see each other's entries, however alike their ids, and every
    session may use the same entry ids.

    The ids are the transcript clauses' confusable ones (case, trailing spaces, NFC vs
    NFD, accents, SQL wildcards, a NUL, past the 64th character, at the byte limit).
    Catches case- and accent-insensitive collations, PAD SPACE, ``LIKE``, truncated
    keys, and entry ids made unique across the backend (``PRIMARY KEY (id)``).
    """
    ids = confusable_ids(t.new_session("log-iso-"))
    with checking(log_sessions_are_isolated, t.run) as check:
        usable = [check.call(session, f"append to id {session!r}", t.store.call(
            "append", session, [_msg(f"entry-{i}", None, text=f"appended to session #{i}")])) is not RAISED
            for i, session in enumerate(ids)]
        owner = {f"appended to session #{i}": i for i in range(len(ids))}
        for i, session in enumerate(ids):
            if not usable[i]:
                continue
            got = _read(check, t, session)
            want = [_msg(f"entry-{i}", None, text=f"appended to session #{i}")]
            if got is RAISED or got == want:
                continue
            texts = [p.text for e in got if isinstance(e, Entry) and isinstance(e.payload, Message)
                     for p in e.payload.content if isinstance(p, Text)] if isinstance(got, list) else []
            others = [owner[x] for x in texts if x in owner and owner[x] != i]
            if others:
                check.add(session, f"sessions merged: reading {session!r} gave the entries appended to "
                          f"{ids[others[0]]!r}: " + describe_id_merge(session, ids[others[0]]))
            else:
                _expect_log(check, session, want, got)
        # The same entry id in two unrelated sessions: both hold it (a fork relies on it).
        for n, session in enumerate((t.new_session("log-iso-same"), t.new_session("log-iso-same"))):
            same = [_msg("same-id", None, text=f"session {n}")]
            try:
                t.run(t.store.call("append", session, same))
            except ValueError as exc:
                check.add(session, "an entry id used in another session was refused: entry ids are unique "
                          f"per session, not across the backend ({describe_exception(exc)})")
                continue
            except Exception as exc:
                check.add(session, f"append() raised {describe_exception(exc)}")
                continue
            _expect_log(check, session, same, _read(check, t, session))


@clause(needs=_NEEDS, replica=True)
def log_replicas_see_each_others_appends(t: Target) -> None:
    """What one handle appends, another handle on the same backend reads at once, even
    after it has read the session before.

    Catches a per-handle cache of the log kept up to date with the handle's own writes
    only, and logs kept in process memory.
    """
    assert t.replica is not None
    one, two = t.store, t.replica
    session = t.new_session("log-replicas")
    with checking(log_replicas_see_each_others_appends, t.run) as check:
        appended: list[Entry] = []
        for n, (writer, reader) in enumerate([(two, one), (one, two), (two, one), (one, two)]):
            before = _read(check, t, session, reader)
            batch = [_msg(f"through-{writer.label.split()[0]}-{n}", appended[-1].id if appended else None)]
            if check.call(session, f"append through the {writer.label}", writer.call("append", session, batch)) \
                    is RAISED:
                return
            appended += batch
            got = _read(check, t, session, reader)
            if got is not RAISED and got == before:
                check.add(session, f"stale read: the {reader.label}'s handle does not see an entry appended "
                          f"through the {writer.label}'s (a per-handle cache)", _ids(appended), _ids(got))
                return
            if not _expect_log(check, session, appended, got, f"read through the {reader.label}: "):
                return


# --- fork and compaction -----------------------------------------------------------------


@clause(needs=_NEEDS)
def log_fork_copies_the_active_path(t: Target) -> None:
    """A fork copies exactly the path from the root to the leaf (or to a chosen entry)
    into a new session, entry ids included, and leaves the source alone; a fork into a
    session that has entries is refused and writes nothing.

    Runs :func:`storetest.projections.fork`, which uses the store's own ``fork`` when it
    has one. Catches a native fork that copies the whole tree (``INSERT ... SELECT``
    without the walk up the parents), ``create`` that appends into an existing session,
    and entry ids unique across the backend (a fork cannot copy them).
    """
    log = log_handle(t.store)
    source = t.new_session("log-fork-src")
    tree = [*_chain("e", 4), _msg("edit", "e1"), _msg("edit-reply", "edit")]  # e2, e3 abandoned
    with checking(log_fork_copies_the_active_path, t.run) as check:
        if check.call(source, "append()", log.append(source, tree)) is RAISED:
            return
        for leaf in (None, "e3"):
            target = t.new_session("log-fork-dst")
            want = path(tree, leaf)
            try:
                t.run(fork(log, source, target, leaf))
            except Exception as exc:
                check.add(target, f"fork of {source!r} (leaf {leaf!r}) raised {describe_exception(exc)}"
                          + (": entry ids must be unique per session, not across the backend (a fork "
                             "copies them)" if isinstance(exc, ValueError) else ""))
                continue
            got = _read(check, t, target)
            if isinstance(got, list) and got != want and {e.id for e in tree} <= set(map(_id, got)):
                check.add(target, f"fork copied the whole tree: {len(got) - len(want)} entries off the "
                          f"active path came along (walk up from the leaf)", _ids(want), _ids(got))
            else:
                _expect_log(check, target, want, got, "the fork: ")
        _expect_log(check, source, tree, _read(check, t, source), "the fork's source: ")
        taken = t.new_session("log-fork-taken")
        mine = [_msg("mine", None)]
        if check.call(taken, "append()", log.append(taken, mine)) is RAISED:
            return
        try:
            t.run(fork(log, source, taken))
        except SessionExists:
            pass
        except Exception as exc:
            check.add(taken, f"a fork into a session with entries raised {describe_exception(exc)}, "
                      "not SessionExists")
        else:
            check.add(taken, "fork wrote into a session that already had entries (create must refuse a "
                      "session that exists)")
        _expect_log(check, taken, mine, _read(check, t, taken), "after a refused fork: ")


@clause(needs=_NEEDS)
def log_compaction_removes_nothing(t: Target) -> None:
    """A compaction only appends: every entry stays, the model reads the summary then
    the kept entries, and a branch from before the compaction reads the whole,
    uncompacted path.

    Catches "compaction" done as a truncation (``DELETE`` of what the summary covers, a
    rewritten file starting at the summary), which loses the history a rewind needs.
    """
    log = log_handle(t.store)
    session = t.new_session("log-compact")
    chain = _chain("e", 6)
    with checking(log_compaction_removes_nothing, t.run) as check:
        if check.call(session, "append()", log.append(session, chain)) is RAISED:
            return
        made = check.call(session, "compact()", compact(log, session, "summary of e0-e2", "e3",
                                                         entry_id="compaction", created_at=T0))
        if made is RAISED:
            return
        got = _read(check, t, session)
        if got is RAISED or not isinstance(got, list):
            return
        gone = [e.id for e in chain if e not in got]
        if gone:
            check.add(session, f"the compaction deleted {len(gone)} entries it summarized (e.g. {gone[0]!r}): "
                      "a compaction only appends", _ids([*chain, made]), _ids(got))
            return
        if not _expect_log(check, session, [*chain, made], got, "after compaction: "):
            return
        if model_view(got) != [made, *chain[3:]]:
            check.add(session, "the model does not read the summary then the kept entries",
                      _ids([made, *chain[3:]]), _ids(model_view(got)))
        rewind = _msg("rewind", "e1")
        if check.call(session, "append() before the compaction", log.append(session, [rewind])) is RAISED:
            return
        got = _read(check, t, session)
        if isinstance(got, list) and model_view(got) != [*chain[:2], rewind]:
            check.add(session, "a branch from before the compaction does not read the uncompacted path",
                      _ids([*chain[:2], rewind]), _ids(path(got)))


# --- the model ---------------------------------------------------------------------------


@clause(needs=_NEEDS)
def log_store_matches_model(t: Target) -> None:
    """Random interleavings of appends (good and bad), creates, forks, compactions and
    reads, over several sessions with confusable ids and every handle, match a plain
    dict of lists at every step.

    Catches bugs that only appear in combination: a cache updated on append but not on
    create, a refused batch that poisons the next one, ids checked in the wrong session.
    """
    handles = t.handles()
    index = st.integers(0, 2)
    which_handle = st.integers(0, len(handles) - 1)

    class LogModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.prefix = prefix = t.new_session("log-model-")
            self.sessions = [prefix + s for s in ("a", "A", "a ")]
            self.logs: dict[str, list[Entry]] = {s: [] for s in self.sessions}
            self.compactions = 0

        def _compare(self, session: str, got: object) -> None:
            check = Check(log_store_matches_model)
            _expect_log(check, session, self.logs[session], got)
            check.raise_if_any()

        @rule(which=index, handle=which_handle, data=st.data())
        def append(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            batch = data.draw(strategies.logs(
                max_size=3, first_parents=tuple(e.id for e in self.logs[session]), simple=True,
                id_prefix=self.prefix))
            note(f"handle {handle}: append({session!r}, {[e.id for e in batch]})")
            t.run(handles[handle].call("append", session, batch))
            self.logs[session] += batch

        @precondition(lambda self: any(self.logs.values()))
        @rule(which=index, handle=which_handle, data=st.data())
        def append_refused(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            known = [e.id for e in self.logs[session]]
            bad = data.draw(st.sampled_from([*known, "orphan"])) if known else "orphan"
            batch = [_msg(f"ok-{len(known)}", known[-1] if known else None),
                     _msg(bad, None) if bad != "orphan" else _msg("orphan", "no-such-parent")]
            note(f"handle {handle}: append({session!r}, {[e.id for e in batch]}) must be refused")
            check = Check(log_store_matches_model)
            what = "an unknown parent" if bad == "orphan" else "a reused id"
            try:
                t.run(handles[handle].call("append", session, batch))
            except ValueError:
                got = t.run(handles[handle].call("entries", session))
                if got != self.logs[session]:
                    check.add(session, f"the refused batch (with {what}) was partly written: "
                              + describe_log(self.logs[session], got), _ids(self.logs[session]), _ids(got))
            else:
                check.add(session, f"a batch with {what} was accepted")
            check.raise_if_any()

        @rule(which=index, handle=which_handle, data=st.data())
        def create(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            batch = data.draw(strategies.logs(max_size=3, simple=True, id_prefix=self.prefix).filter(bool))
            note(f"handle {handle}: create({session!r}, {[e.id for e in batch]})")
            made = t.run(handles[handle].call("create", session, batch))
            want = not self.logs[session]
            if made is not want:
                check = Check(log_store_matches_model)
                check.add(session, f"create() returned {made!r} on a session with "
                          f"{len(self.logs[session])} entries")
                check.raise_if_any()
            if want:
                self.logs[session] = list(batch)

        @precondition(lambda self: any(self.logs.values()))
        @rule(which=index, handle=which_handle, data=st.data())
        def fork_or_compact(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            line = path(self.logs[session])
            if not line:
                return
            log = log_handle(handles[handle])
            if data.draw(st.booleans(), label="fork"):
                leaf = data.draw(st.sampled_from([e.id for e in self.logs[session]]), label="leaf")
                target = t.new_session("log-model-fork")
                note(f"handle {handle}: fork({session!r} at {leaf!r} into {target!r})")
                t.run(fork(log, session, target, leaf))
                self.logs[target] = path(self.logs[session], leaf)
                self._compare(target, t.run(handles[-1].call("entries", target)))
            else:
                keep = data.draw(st.sampled_from([e.id for e in line]), label="first kept")
                note(f"handle {handle}: compact({session!r}, keeping from {keep!r})")
                made = t.run(compact(log, session, "summary", keep, entry_id=f"{self.prefix}c{self.compactions}",
                                     created_at=T0))
                self.compactions += 1
                self.logs[session].append(made)

        @rule(which=index, handle=which_handle)
        def read(self, which: int, handle: int) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: entries({session!r})")
            self._compare(session, t.run(handles[handle].call("entries", session)))

        @invariant()
        def first_session_matches(self) -> None:
            self._compare(self.sessions[0], t.run(handles[-1].call("entries", self.sessions[0])))

    settings = hypothesis_settings(t, scale=0.5, steps=t.profile.model_steps)
    run_state_machine_as_test(seed(t.seed)(LogModel), settings=settings)  # type: ignore[no-untyped-call]
