"""Entry logs under concurrency: many writers and replica handles appending at once all
land exactly once, a batch is never seen in part, and of racing creates one wins.

Real bugs behind these clauses: a log rewritten from a stale snapshot, ``INSERT``s in
autocommit, a lock that holds only inside one handle, ``SELECT count(*)`` then
``INSERT`` for a create.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Handle, Target
from storetest.clauses._log_support import _NEEDS, T0, _chain, _expect_log, _id, _ids, _msg, _read
from storetest.clauses._registry import clause
from storetest.entries import Entry

# --- concurrency -----------------------------------------------------------------------


def _in_rounds(t: Target, check: Check, label: str, one_round: Callable[[Target, Check, str], None]) -> None:
    """The profile's rounds of ``one_round``, each on a new session, until one finds a violation."""
    for round_ in range(t.profile.race_rounds):
        one_round(t, check, t.new_session(f"{label}{round_}"))
        if check.violations:
            return


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
            f"{len(lost)} entries lost, {len(duplicated)} duplicated, {len(unexpected)} unexpected"
            + "".join(f" ({label}: {', '.join(map(repr, ids[:3]))})" for label, ids in
                      (("lost", lost), ("duplicated", duplicated), ("unexpected", unexpected)) if ids)
            + " "
            f"[lost={len(lost)} duplicated={len(duplicated)} unexpected={len(unexpected)} of "
            f"{len(want)} acknowledged]" + (f": {why}" if why else ""),
            lost=lost[:4] or None, duplicated=duplicated[:4] or None, unexpected=unexpected[:4] or None,
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
        _in_rounds(t, check, "log-atomic", _atomic_round)


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
        _in_rounds(t, check, "log-create-race", _create_round)


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
        # The returns go in the diagnosis: "sent:" would mislabel them as an input.
        check.add(session, f"{len(winners)} of {creators} racing creates returned True (they returned "
                  f"{wins!r}; exactly one must win: check and insert in one step)", got=_ids(got))
        return
    _expect_log(check, session, batches[winners[0]], got, "after racing creates: ")


@clause(needs=_NEEDS, races=True)
def log_conflicting_appends_have_one_winner(t: Target) -> None:
    """Of several appends started at once (through every handle) whose batches share an
    entry id, exactly one lands; every other raises ``ValueError`` and writes nothing, so
    the shared id is stored once.

    Catches ids checked, then written, with no lock or unique constraint between (a
    12-line race of two handles stored one id twice in 49 of 50 rounds), and a loser
    that fails with a driver's error instead of ``ValueError``.
    """
    with checking(log_conflicting_appends_have_one_winner, t.run) as check:
        _in_rounds(t, check, "log-conflict", _conflict_round)


def _conflict_round(t: Target, check: Check, session: str, writers: int = 3) -> None:
    handles = t.handles()
    if check.call(session, "append()", handles[0].call("append", session, [_msg("root", None)])) is RAISED:
        return
    batches = [[_msg("shared", "root", text=f"writer {w}"), _msg(f"own-{w}", "shared")]
               for w in range(writers)]

    def writer(w: int) -> Callable[[], Awaitable[tuple[Exception | None]]]:
        # The error goes back in a tuple: t.race raises an exception it is handed.
        async def run() -> tuple[Exception | None]:
            try:
                await handles[w % len(handles)].call("append", session, batches[w])
            except Exception as exc:
                return (exc,)
            return (None,)
        return run

    outcomes = [outcome for (outcome,) in t.race([writer(w) for w in range(writers)])]
    got = _read(check, t, session)
    if not isinstance(got, list):
        return
    ids = [_id(e) for e in got]
    winners = [w for w, outcome in enumerate(outcomes) if outcome is None]
    if ids.count("shared") > 1:
        check.add(session, f"entry id 'shared' stored {ids.count('shared')} times: {len(winners)} of "
                  f"{writers} racing appends sharing it succeeded (the ids are checked, then written, "
                  "with no lock or unique constraint between)", got=ids)
        return
    for outcome in outcomes:
        if outcome is not None and not isinstance(outcome, ValueError):
            check.add(session, f"a racing append that lost on a shared id raised "
                      f"{describe_exception(outcome)}, not ValueError")
            return
    if len(winners) != 1:
        check.add(session, f"{len(winners)} of {writers} racing appends sharing an id succeeded "
                  "(exactly one must land; the others raise ValueError)", got=ids)
        return
    _expect_log(check, session, [_msg("root", None), *batches[winners[0]]], got,
                f"after racing appends sharing an id (writer {winners[0]} won): ")
