"""Item histories under concurrency: each item popped by exactly one caller, a clear
racing an add lands before or after it, a batch is never seen in part nor interleaved
with another, and nothing is lost or duplicated across handles.

Real bugs behind these clauses (each seen in an agent SDK's stores): ``pop_item`` as a
``SELECT`` then a ``DELETE`` with no lock (openai-agents-python #4205: one item handed
to two callers); concurrent first writes dropping items or raising ``IntegrityError``
(#2722); a per-call ``threading.Lock()`` that excludes nothing (#1953); ``clear_session``
racing ``add_items`` raising ``IntegrityError`` (``SQLAlchemySession`` on Postgres);
``RPUSH`` or ``INSERT`` one item at a time (LangChain's Redis history: a reader sees half
a batch, replicas' batches interleave).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from storetest._engine import races
from storetest._engine.backends import (
    fresh_fixtures,
    handles_on_one_backend,
    open_handles,
    run_in_processes,
    shared_connections,
)
from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Handle, Target

# Callers of each race kind, each on a handle of its own (a factory call of its own):
# a per-handle lock excludes only its own handle's callers.
from storetest._engine.topologies import ADDERS_AGAINST_A_CLEAR, CONSTRUCTORS, RACERS
from storetest.clauses._item_support import NEEDS, expect, labelled, protocol, read, texts_of
from storetest.clauses._registry import clause
from storetest.items import Item, same_items


def _calls(t: Target, calls: list[Callable[[], Awaitable[Any]]], handles: Sequence[Handle] = ()) -> list[Any]:
    t.rng.shuffle(calls)
    return _race(t, calls, handles)


def _race(t: Target, calls: Sequence[Callable[[], Awaitable[Any]]], handles: Sequence[Handle] = ()) -> list[Any]:
    """:meth:`Target.race`, over ``handles`` (more than the clause's own) when given."""
    if not handles:
        return t.race(calls)
    return t.run(races.together(calls, threads=not any(h.is_async for h in (*handles, *t.handles()))))


def _account(check: Check, session: str, want: list[object], got: list[object], what: str) -> bool:
    """lost = duplicated = unexpected = 0 between ``want`` and ``got`` (item texts)."""
    have, need = Counter(got), Counter(want)
    lost = [x for x in need if have[x] < need[x]]
    duplicated = [x for x in have if x in need and have[x] > need[x]]
    unexpected = [x for x in have if x not in need]
    if lost or duplicated or unexpected:
        check.add(session, f"{what}: {len(lost)} lost, {len(duplicated)} duplicated, {len(unexpected)} "
                  f"unexpected of {len(want)} [lost={len(lost)} duplicated={len(duplicated)} "
                  f"unexpected={len(unexpected)}]", lost=lost[:3] or None, duplicated=duplicated[:3] or None,
                  unexpected=unexpected[:3] or None)
        return False
    return True




@clause(needs=NEEDS, races=True)
def pop_item_hands_each_item_out_once(t: Target) -> None:
    """Callers popping one session at once, each through a handle of its own, each get
    a different item: every item is popped exactly once (lost = duplicated = 0), each
    caller's pops come newest first, and the session ends empty.

    Catches ``pop_item`` as a read then a delete with nothing between them locked
    (openai-agents-python #4205), a per-call or per-handle lock (two handles hand out one
    item), ``SELECT ... LIMIT 1`` then ``DELETE`` under READ COMMITTED.
    """
    with checking(pop_item_hands_each_item_out_once, t.run) as check, \
            handles_on_one_backend(t, RACERS) as handles:
        for round_ in range(t.profile.race_rounds):
            t.tick()
            session = t.new_session(f"items-pop-race{round_}")
            stored = labelled("pop", 2 * RACERS)
            if check.call(session, "add_items()", t.store.call("add_items", session, stored)) is RAISED:
                return
            if not _pop_round(t, check, session, stored, handles):
                return


def _pop_round(t: Target, check: Check, session: str, stored: list[Item], handles: Sequence[Handle]) -> bool:
    """A caller per handle pops ``session`` until it is empty, all at once; whether all went well."""
    popped: list[list[object]] = [[] for _ in handles]

    def popper(k: int) -> Callable[[], Awaitable[None]]:
        handle = handles[k]

        async def run() -> None:
            while (got := await handle.call("pop_item", session)) is not None:
                popped[k].append(got.get("content") if isinstance(got, dict) else got)

        return run

    try:
        _calls(t, [popper(k) for k in range(len(handles))], handles)
    except Exception as exc:
        check.add(session, f"a racing pop_item() raised {describe_exception(exc)}")
        return False
    texts = texts_of(stored)
    ok = _account(check, session, texts, [x for p in popped for x in p],
                  f"items popped by {len(handles)} racing callers")
    for k, mine in enumerate(popped):
        order = [texts.index(x) for x in mine if x in texts]
        if order != sorted(order, reverse=True):
            check.add(session, f"caller {k} popped items out of newest-first order", got=mine)
            ok = False
    return expect(check, session, [], read(check, t, session), "after every pop: ", short=True) and ok


#: Adders racing the clear, round by round: one (the add and the clear alone), and
#: several, where an add that checks for the session row the clear deleted meets
#: another add creating it.
CLEAR_ADDERS = ADDERS_AGAINST_A_CLEAR


@clause(needs=NEEDS, races=True, symptom=True)
def clear_racing_add_lands_before_or_after(t: Target) -> None:
    """A ``clear_session`` racing one or several ``add_items`` raises nothing and leaves
    the session as if the calls ran one at a time: none of the old items, and each new
    batch whole and adjacent or absent (absent: added before the clear), never part of a batch.

    Catches ``SQLAlchemySession`` on Postgres (the clear deletes the session row while
    adds insert it again, or under it: ``IntegrityError``), an add that checks for the
    session row, then inserts it (several adders after a clear both insert it), a clear
    that deletes items one by one while new ones arrive, a Redis clear of the list that
    leaves the counter.
    """
    with checking(clear_racing_add_lands_before_or_after, t.run) as check, \
            handles_on_one_backend(t, RACERS + 1) as handles:
        # Both orders in turn, for each number of adders: which call starts first decides
        # whether a check-then-insert add is caught, and a shuffle left that to a coin flip
        # each round (scripts/race_rounds.py). Two calls overlap in the window that matters
        # less often than the other races' callers do: three times the rounds.
        for round_ in range(3 * t.profile.race_rounds):
            t.tick()
            adders = CLEAR_ADDERS[(round_ // 2) % len(CLEAR_ADDERS)]
            session = t.new_session(f"items-clear-race{round_}")
            old, new = labelled("old", 2), [labelled(f"new{k}", 3) for k in range(adders)]
            if check.call(session, "add_items()", t.store.call("add_items", session, old)) is RAISED:
                return
            clearer = handles[0]
            adding = [handles[(round_ + 1 + k) % len(handles)] for k in range(adders)]
            clear = [functools.partial(clearer.call, "clear_session", session)]
            adds = [functools.partial(h.call, "add_items", session, batch)
                    for h, batch in zip(adding, new, strict=True)]
            what = "add_items()" if adders == 1 else f"{adders} add_items()"
            try:
                _race(t, [*adds, *clear] if round_ % 2 else [*clear, *adds], handles)
            except Exception as exc:
                check.add(session, f"clear_session() racing {what} raised {describe_exception(exc)}")
                return
            got = read(check, t, session)
            if got is RAISED:
                return
            seen = texts_of(got)
            wanted = [x for batch in new for x in texts_of(batch)]
            stale = [x for x in seen if x in texts_of(old)]
            counts = Counter(seen)
            odd = [x for x in seen if x not in wanted and x not in stale] + [x for x in counts if counts[x] > 1]
            if stale or odd:
                check.add(session, f"after clear_session() raced {what}, the session holds "
                          + ("old items the clear should have removed" if stale else "items not added once")
                          + ": the clear and the add interleaved", expected="[] or whole new batches", got=seen)
                return
            if not protocol(t).atomic_batches:
                # One message at a time (no batch in the protocol): adders interleave, and the
                # clear may land inside a batch; each batch's messages left are its last, in order.
                for batch in new:
                    mine = [x for x in seen if x in set(texts_of(batch))]
                    if mine != texts_of(_landed_tail(batch, seen)):
                        check.add(session, f"after clear_session() raced {what}, a batch's messages are not its "
                                  "last ones in order: a message lost or reordered", texts_of(batch), mine)
                        return
                continue
            if not _contiguous(check, session, new, seen, f"after clear_session() raced {what}, the session holds"):
                return


def _writer(handle: Handle, session: str, batch: list[Item]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        await handle.call("add_items", session, batch)
    return run


def _reader(handle: Handle, session: str, seen: list[list[object]]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        for _ in range(4):
            seen.append(texts_of(await handle.call("get_items", session)))
            await asyncio.sleep(0)  # let the writers on between reads
    return run


def _batches_writer(handle: Handle, session: str, w: int, acked: list[object],
                    errors: list[str]) -> Callable[[], Awaitable[None]]:
    """Writer ``w``: three batches of two in a row; what landed goes on ``acked``."""
    async def run() -> None:
        for b in range(3):
            batch = labelled(f"w{w}-b{b}", 2)
            try:
                await handle.call("add_items", session, batch)
            except Exception as exc:
                errors.append(f"writer {w} through the {handle.label}: {describe_exception(exc)}")
                return
            acked.extend(texts_of(batch))
    return run


def _landed_tail(batch: list[Item], seen: list[object]) -> list[Item]:
    """The longest end of ``batch`` whose items are all in ``seen``: what a clear landing
    between two of its messages leaves, when the protocol adds one message at a time."""
    texts, present = texts_of(batch), set(seen)
    k = next((i for i in range(len(batch)) if all(x in present for x in texts[i:])), len(batch))
    return batch[k:]


def _contiguous(check: Check, session: str, batches: list[list[Item]], seen: list[object],
                what: str) -> bool:
    """Each batch in ``seen`` is whole or absent, and its items adjacent and in order."""
    positions: dict[object, list[int]] = {}  # one pass over seen, not one per batch
    for i, x in enumerate(seen):
        positions.setdefault(x, []).append(i)
    for batch in batches:
        texts = texts_of(batch)
        where = sorted(i for x in set(texts) for i in positions.get(x, ()))
        if not where:
            continue
        if len(where) != len(batch):
            check.add(session, f"{what} {len(where)} of a {len(batch)}-item batch: the batch is written item by "
                      "item, not in one transaction", texts, seen)
            return False
        if [seen[i] for i in where] != texts or where[-1] - where[0] != len(batch) - 1:
            check.add(session, "two batches interleaved: a batch's items are not adjacent and in order (each "
                      "batch written item by item, or its rows ordered by ids that concurrent transactions draw "
                      "in turn)", texts, seen)
            return False
    return True


@clause(needs=NEEDS, races=True)
def a_batch_is_atomic_to_readers(t: Target) -> None:
    """A reader racing ``add_items`` sees each batch whole or not at all.

    Catches ``add_items`` written one item per command (``RPUSH`` per item, ``INSERT``s
    in autocommit, one transaction per item) with no transaction or pipeline around it.
    """
    with checking(a_batch_is_atomic_to_readers, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            t.tick()
            session = t.new_session(f"items-atomic{round_}")
            batches = [labelled(f"w{w}", 4) for w in range(2)]
            seen: list[list[object]] = []
            try:
                _calls(t, [*(_writer(t.store, session, b) for b in batches), *(_reader(t.store, session, seen)
                                                                             for _ in range(2))])
            except Exception as exc:
                check.add(session, f"a racing add_items() or get_items() raised {describe_exception(exc)}")
                return
            for view in seen:
                if not _contiguous(check, session, batches, view, "a reader racing add_items() saw"):
                    return


@clause(needs=NEEDS, races=True)
def concurrent_batches_never_interleave(t: Target) -> None:
    """Batches added at once, through every handle, land each whole and adjacent: no
    item of one batch between two of another's.

    Catches a batch written item by item (LangChain's ``RedisChatMessageHistory``:
    replicas' batches interleave), ids taken one at a time from a shared counter, a
    lock held per item rather than per batch.
    """
    handles = t.handles()
    with checking(concurrent_batches_never_interleave, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            t.tick()
            session = t.new_session(f"items-interleave{round_}")
            batches = [labelled(f"w{w}", 4) for w in range(4)]
            try:
                _calls(t, [_writer(handles[w % len(handles)], session, b) for w, b in enumerate(batches)])
            except Exception as exc:
                check.add(session, f"a racing add_items() raised {describe_exception(exc)}")
                return
            got = read(check, t, session)
            if got is RAISED:
                return
            if not _account(check, session, [x for b in batches for x in texts_of(b)], texts_of(got),
                            "items of concurrent batches") or \
                    not _contiguous(check, session, batches, texts_of(got), "the history holds"):
                return


@clause(needs=NEEDS, races=True)
def concurrent_adds_lose_nothing(t: Target) -> None:
    """Many writers, each on a handle of its own, each adding several batches to one
    session at once, all land: every item exactly once (lost = duplicated = unexpected
    = 0), each writer's in the order it added them.

    Catches concurrent first writes that drop items or raise ``IntegrityError`` on the
    session row (openai-agents-python #2722), a history rewritten from a stale copy
    (read, append, write back), a per-call ``threading.Lock()`` (#1953), a per-handle lock.
    """
    with checking(concurrent_adds_lose_nothing, t.run) as check, handles_on_one_backend(t, RACERS) as handles:
        for round_ in range(t.profile.race_rounds):
            t.tick()
            session = t.new_session(f"items-many{round_}")
            acked: list[list[object]] = [[] for _ in range(RACERS)]
            errors: list[str] = []
            _calls(t, [_batches_writer(handles[w % len(handles)], session, w, acked[w], errors)
                       for w in range(RACERS)], handles)
            got = read(check, t, session)
            if got is RAISED:
                return
            ok = _account(check, session, [x for a in acked for x in a], texts_of(got), "concurrent adds")
            seen = texts_of(got)
            for w, mine in enumerate(acked):
                order = [seen.index(x) for x in mine if x in seen]
                if order != sorted(order):
                    check.add(session, f"writer {w}'s items came back out of the order it added them", mine, seen)
                    ok = False
            for error in errors[:3]:
                check.add(session, f"a concurrent add_items() raised: {error}")
                ok = False
            if not ok:
                return


# --- a fresh backend, child processes -----------------------------------------------------


@clause(needs=NEEDS, replica=True)
def item_factory_calls_share_only_their_backend(t: Target) -> None:
    """Stores from separate factory calls share exactly their backend: two on one backend
    see each other's adds and clears; a store on a second, fresh backend, used with the
    same session id, sees none of the first backend's items, and its own writes reach
    neither the first backend nor the clause's own.

    Catches state kept in a class attribute or a module global (a cache, "what I last
    wrote", a connection pool keyed by session id), shared by every store the process
    makes, which a run through one factory call never shows.
    """
    session = t.new_session("items-factories")
    with checking(item_factory_calls_share_only_their_backend, t.run) as check:
        with fresh_fixtures(t.fixtures) as one, fresh_fixtures(t.fixtures) as two:
            if one == dict(t.fixtures):
                return  # nothing storetest provisions: no fresh backend to open
            for where, want, got in t.run(_two_backends(t, one, two, session)):
                if isinstance(got, str) or not same_items(want, got):
                    check.add(session, f"{where}: " + (f"a call raised {got!r}" if isinstance(got, str) else
                              f"{len(want)} item(s) expected, {len(got)} came back"),
                              texts_of(want), got if isinstance(got, str) else texts_of(got))
                    return


async def _two_backends(t: Target, one: dict[str, Any], two: dict[str, Any],
                        session: str) -> list[tuple[str, list[Item], Any]]:
    """Two factory calls on backend ``one``, one on ``two``, all using ``session``: what
    each read should have given and gave (an error's description for a call that raised)."""
    first, second = labelled("backend-one", 2), labelled("backend-two", 3)
    out: list[tuple[str, list[Item], Any]] = []
    async with open_handles(t, one, 2) as (a, b), open_handles(t, two, 1) as (c,):
        add, get, clear = "add_items", "get_items", "clear_session"
        steps: list[tuple[str, Any, list[Item] | None]] = [
            ("add through the first factory call on one backend", functools.partial(a.call, add, session, first),
             None),
            ("what one factory call added, read through a second factory call on the same backend",
             functools.partial(b.call, get, session), first),
            ("a store on another backend read the same session id before writing it",
             functools.partial(c.call, get, session), []),
            ("add through a store on another backend", functools.partial(c.call, add, session, second), None),
            ("after a store on another backend added to the same session id, the first backend's items",
             functools.partial(a.call, get, session), first),
            ("a store on another backend read back its own items", functools.partial(c.call, get, session), second),
            *([("clear through the second factory call on one backend", functools.partial(b.call, clear, session),
                None),
               ("after a clear on one backend, a store on another backend's items",
                functools.partial(c.call, get, session), second)] if protocol(t).clears else []),
            ("the clause's own backend, after stores on two others used the same session id",
             functools.partial(t.store.call, get, session), []),
        ]
        for where, call, want in steps:
            try:
                got = await call()
            except Exception as exc:
                out.append((where, want or [], describe_exception(exc)))
                break
            if want is not None:
                out.append((where, want, got))
    return out


#: What races on a fresh backend, round by round: the sessions' constructors with the
#: first calls (each racer's first call constructs its session), the constructors alone
#: (then the first calls one by one), the first calls alone (each session constructed
#: beforehand, one by one, as a ``setup()`` would).
FRESH_RACES = ("constructors and first calls", "constructors", "first calls")
#: Handles on each fresh backend, each racing.
FRESH_RACERS = CONSTRUCTORS


@clause(needs=NEEDS, races=True)
def first_calls_on_a_fresh_backend_succeed(t: Target) -> None:
    """Several handles opened on a fresh backend (a new database, directory or table
    set each round), constructing their sessions and making their first calls at once,
    all succeed, and every batch they added is there: whether the constructors race
    with the first calls, alone, or the first calls race after constructors ran one by one.

    Catches tables created on first use without ``IF NOT EXISTS`` or a lock ("table
    already exists", "database is locked": openai-agents-python #4987), a constructor that
    checks for its table, then creates it (LangChain's ``SQLChatMessageHistory``), the
    first session row inserted by check-then-insert (``IntegrityError``, #2722), and
    MariaDB deadlocking on concurrent first writers (``SQLAlchemySession``).
    """
    with checking(first_calls_on_a_fresh_backend_succeed, t.run) as check:
        # Each kind of race twice at least: a constructor race lost on a loaded machine once in
        # ten rounds (chat-constructor-check-then-create, 18 of 20 runs at load 5) is then lost once in a hundred.
        for round_ in range(max(2 * len(FRESH_RACES), t.profile.race_rounds // 2)):
            t.tick()
            racing = FRESH_RACES[round_ % len(FRESH_RACES)]
            session = t.new_session(f"items-fresh{round_}")
            with fresh_fixtures(t.fixtures) as fixtures:
                errors, got = t.run(_fresh_round(t, fixtures, session, racing))
            for error in errors[:3]:
                check.add(session, f"a first call on a fresh backend raised {error} ({racing} racing): make table "
                          "creation and the first session row idempotent under concurrency (IF NOT EXISTS, "
                          "ON CONFLICT DO NOTHING)")
            if got is not RAISED:
                want = [x for w in range(FRESH_RACERS - 1) for x in texts_of(labelled(f"first{w}", 2))]
                _account(check, session, want, texts_of(got), "the first writers' items")
            if check.violations:
                return


async def _fresh_round(t: Target, fixtures: dict[str, Any], session: str, racing: str) -> tuple[list[str], Any]:
    errors: list[str] = []
    other = t.new_session("items-fresh-read")

    def first(handle: Handle, k: int, what: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            name = what if what == "open_session" else "add_items" if k < FRESH_RACERS - 1 else "get_items"
            try:
                if name == "add_items":
                    await handle.call(name, session, labelled(f"first{k}", 2))
                else:
                    await handle.call(name, session if k < FRESH_RACERS - 1 else other)
            except Exception as exc:
                errors.append(f"through {handle.label} ({name}): {describe_exception(exc)}")
        return run

    async with open_handles(t, fixtures, FRESH_RACERS) as handles:
        constructs = all(callable(getattr(h.raw, "open_session", None)) for h in handles)
        threads = not any(h.is_async and not h.threaded for h in handles)
        if racing != "constructors and first calls" and constructs:
            if racing == "constructors":
                await races.together([first(h, k, "open_session") for k, h in enumerate(handles)], threads=threads)
            else:
                for k, h in enumerate(handles):
                    await first(h, k, "open_session")()
        if racing == "constructors" and constructs:
            for k, h in enumerate(handles):
                await first(h, k, "call")()
        else:
            await races.together([first(h, k, "call") for k, h in enumerate(handles)], threads=threads)
        try:
            got = await handles[0].call("get_items", session)
        except Exception as exc:
            errors.append(f"get_items() after the first calls: {describe_exception(exc)}")
            got = RAISED
    return errors, got


def process_worker(t: Target, role: str, w: int, session: str, seconds: float,
                   size: int) -> tuple[list[str], list[str]]:
    """In a child process, for ``seconds`` (processes wake from their barrier at
    different moments on a busy machine; a time window makes them overlap):

    - ``role="writer"``: add batches of ``size`` items to ``session`` (at least 3, at
      most 500); returns the texts of the items it added, and what it raised;
    - ``role="reader"``: read ``session`` over and over; returns up to 3 views that
      held part of a batch, and what it raised.
    """
    got: list[str] = []
    errors: list[str] = []
    started = time.monotonic()
    for b in range(500):
        if b >= 3 and time.monotonic() - started > seconds:
            break
        try:
            if role == "writer":
                batch = labelled(f"p{w}-b{b}", size)
                t.run(t.store.call("add_items", session, batch))
                got += [str(x) for x in texts_of(batch)]
                continue
            view = [str(x) for x in texts_of(t.run(t.store.call("get_items", session)))]
        except Exception as exc:
            errors.append(f"process {w} ({role}): {describe_exception(exc)}")
            break
        counts = Counter(x.split(" #")[0] for x in view)
        if any(n != size for n in counts.values()) and len(got) < 3:
            got.append(" | ".join(view))
    return got, errors


@clause(needs=NEEDS, races=True, processes=True)
def adds_from_processes_land_whole(t: Target) -> None:
    """Writers in separate processes (forked from the run's fork server, or spawned
    and importing the factory by name), each on its own handle, adding batches to one
    session at once, all land: every item exactly once, each batch whole and adjacent,
    each writer's batches in order; and a reader in another process never sees part of
    a batch.

    Catches a lock that holds within one process only (``asyncio.Lock``,
    ``threading.Lock``: openai-agents-python #1953), batches written item by item, a
    history rewritten from a stale copy read by another process.
    """
    session = t.new_session("items-processes")
    writers, seconds, size = 3, 1.0, 6
    with checking(adds_from_processes_land_whole, t.run) as check:
        t.tick()
        roles = [*(("writer", w) for w in range(writers)), ("reader", writers)]
        results = run_in_processes(t, process_worker, [(role, w, session, seconds, size) for role, w in roles])
        partial_views, reader_errors = results.pop()
        whole = protocol(t).atomic_batches  # else one message at a time: no batch to see in part
        for view in partial_views[:1] if whole else ():
            check.add(session, "a reader in another process saw part of a batch: the batch is written item by item, "
                      "not in one transaction", got=view)
        for error in [e for _, errors in results for e in errors[:2]] + reader_errors[:2]:
            check.add(session, f"a call in a child process raised: {error}{shared_connections(t.factory)}")
        got = read(check, t, session)
        if got is RAISED:
            return
        seen = texts_of(got)
        acked = [x for done, _ in results for x in done]
        if not _account(check, session, acked, seen, "items added from several processes"):
            return
        every = [labelled(f"p{w}-b{b}", size) for w in range(writers) for b in range(len(results[w][0]) // size)]
        if whole:
            _contiguous(check, session, every, seen, "the history holds")
        first: dict[object, int] = {}
        for i, x in enumerate(seen):
            first.setdefault(x, i)
        for w, (done, _) in enumerate(results):
            order = [first[x] for x in done if x in first]
            if order != sorted(order):
                check.add(session, f"process {w}'s items came back out of the order it added them", done, seen)
