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

The concurrency clauses are in :mod:`~storetest.clauses.log_races`, fork and compaction
in :mod:`~storetest.clauses.log_operations`, the state machine in
:mod:`~storetest.clauses.log_model`.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import note

from storetest._engine import strategies
from storetest._engine.diagnosis import describe_entry, describe_log, key_scheme_clash
from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Target
from storetest.clauses._log_support import (
    _NEEDS,
    T0,
    _chain,
    _expect_apart,
    _expect_log,
    _id,
    _ids,
    _msg,
    _read,
    _round_trip_corpus,
)
from storetest.clauses._registry import clause
from storetest.clauses._support import examples
from storetest.clauses.transcripts import confusable_ids
from storetest.entries import Entry


@clause(needs=_NEEDS, cost=1)
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
        # Entry by entry only when nothing moved: a reorder compared by position reads as
        # "id 'time-0' came back as 'time-3'".
        if isinstance(got, list) and len(got) == len(corpus) and [_id(e) for e in got] == [e.id for e in corpus]:
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
    ``ValueError``, and nothing of it is written, even the good entries before the bad one;
    a batch of one bad entry too.

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
        # One entry alone: the common append, which a store may send down a path of its own.
        ("one entry, its id already in the session", [_msg("e2", "e3", text="reused id")]),
        ("one entry, its parent in no session", [_msg("new-8", "ghost")]),
        ("one entry, its parent in another session only", [_msg("new-9", "far-away")]),
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
    before_ids = [e.id for e in before]
    # Written, landed and replaced are decided by id: a store that changes what it keeps
    # (times cut to milliseconds) must not read as a batch partly written.
    if ids == before_ids:
        if not refused:
            check.add(session, f"a batch with {what} was accepted without an error (and not written)")
        if got != before:
            check.add(session, "the log came back changed, ids intact: " + describe_log(before, got),
                      expected=_ids(before), got=ids)
        before[:] = [e for e in got if isinstance(e, Entry)]
        return
    new_ids = [i for i in ids if i not in before_ids or ids.count(i) > before_ids.count(i)]
    landed = [e for e in batch if e.id in new_ids]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    replaced = [e for e, back in zip(before, [e for e in got if isinstance(e, Entry)], strict=False)
                if e.id == back.id and e != back and back in batch]
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
                  f"entries landed ({', '.join(repr(e.id) for e in landed)}; {what}); check the whole "
                  "batch, then write it in one transaction", expected=_ids(before), got=ids)
    # Carry on from what the store now holds, so one bad batch does not hide the next.
    before[:] = [e for e in got if isinstance(e, Entry)]



# --- sessions and replicas ---------------------------------------------------------------


@clause(needs=_NEEDS)
def log_sessions_are_isolated(t: Target) -> None:
    """Sessions never see each other's entries, however alike their ids, and every
    session may use the same entry ids.

    The ids are the transcript clauses' confusable ones (case, trailing spaces, NFC vs
    NFD, accents, SQL wildcards, a NUL, past the 64th character, at the byte limit, and
    key-value confusables: ``k`` beside ``k:entries``, glob characters, braces).
    Catches case- and accent-insensitive collations, PAD SPACE, ``LIKE``, truncated
    keys, and entry ids made unique across the backend (``PRIMARY KEY (id)``).
    """
    ids = confusable_ids(t.new_session("log-iso-"))
    with checking(log_sessions_are_isolated, t.run) as check:
        usable = []
        for i, session in enumerate(ids):
            try:
                t.run(t.store.call("append", session, [_msg(f"entry-{i}", None, text=f"appended to session #{i}")]))
            except Exception as exc:
                clash = key_scheme_clash(session, ids)
                check.add(session, f"append to id {session!r} raised {describe_exception(exc)}"
                          + (f": {clash}" if clash else ""))
                usable.append(False)
            else:
                usable.append(True)
        _expect_apart(check, t, ids, {s for s, ok in zip(ids, usable, strict=True) if not ok})
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
