"""Item histories (:mod:`storetest.items`, an OpenAI Agents ``Session``'s shape): items
come back exactly, type for type, in order; ``get_items(limit)`` gives the latest;
``pop_item`` takes the newest; ``clear_session`` empties; sessions never mix, whatever
their ids; what a caller holds is not the store's; replicas see each other's writes.

Real bugs behind these clauses: items through a ``jsonb`` or ``JSON`` column (raw
``arguments`` re-encoded, ``1.0`` turned into ``1``) or through a double (integers past
2^53); ``TEXT`` columns (64 KiB); ``ORDER BY id`` without ``DESC`` before a ``LIMIT`` (the
oldest items for a limit); case-insensitive collations (MariaDB's default merges
``user-abc`` and ``user-ABC``); Redis keys ``prefix:id`` and ``prefix:id:messages`` (session
``x:messages`` is session ``x``'s items); a store that hands out its own list.

These clauses run when the store claims the ``items`` capability, which
:func:`storetest.bindings.openai_agents` gives. The races are in
:mod:`~storetest.clauses.item_races`, the state machine in :mod:`~storetest.clauses.item_model`.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import note
from hypothesis import strategies as st

from storetest._engine import inputs, strategies
from storetest._engine.diagnosis import shorten
from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Handle, Target
from storetest._engine.item_diagnosis import describe_item, describe_item_id_merge, describe_limit, reordered
from storetest.clauses._item_support import NEEDS, expect, labelled, protocol, read, texts_of
from storetest.clauses._registry import clause
from storetest.clauses._support import examples
from storetest.clauses.transcripts import confusable_ids
from storetest.items import Item, same_items, same_value


def _add(check: Check, session: str, handle: Handle, items: list[Item], what: str = "add_items()") -> bool:
    return check.call(session, f"{what} through the {handle.label}",
                      handle.call("add_items", session, items)) is not RAISED


def _one_by_one(check: Check, t: Target, session: str, corpus: list[Item]) -> None:
    """After a batch raised: each item in a session of its own, to name the ones refused."""
    for i, item in enumerate(corpus):
        one = f"{session}/{i}"
        if _add(check, one, t.store, [item], f"add_items() of item {i} ({shorten(item, 60)})"):
            expect(check, one, [item], read(check, t, one))


@clause(needs=NEEDS)
def items_round_trip_exactly(t: Target) -> None:
    """Items come back exactly as added, compared type for type (``1``, ``1.0`` and
    ``True`` are three values; key order within an item is not part of the promise):
    every item type, nested content, unicode, integers past 2^53, raw ``arguments``
    byte for byte.

    Catches items through a ``jsonb``/``JSON`` column or a parse-and-dump of
    ``arguments`` (duplicate keys, whitespace and number forms lost), a double for
    numbers (``2**53 + 1``), a codec that writes ``1.0`` as ``1``, ``True`` stored as ``1``.
    """
    values = protocol(t)
    corpus = [copy.deepcopy(i) for i in values.corpus]
    with checking(items_round_trip_exactly, t.run) as check:
        session = t.new_session("items-corpus")
        if not _add(check, session, t.store, corpus, f"add_items() of {len(corpus)} items"):
            _one_by_one(check, t, session, corpus)
        else:
            got = read(check, t, session)
            # Per item only when the list kept its order: a list read newest first is one
            # reshape of the whole, not every item changed.
            if isinstance(got, list) and len(got) == len(corpus) and not reordered(corpus, got):
                for i, (sent, back) in enumerate(zip(corpus, got, strict=True)):
                    if not same_value(sent, back):
                        check.add(session, f"item {i}: {describe_item(sent, back)}", sent, back)
            else:
                expect(check, session, corpus, got)

    @examples(t, st.lists(values.batches, min_size=1, max_size=3))
    def example(batches: list[list[Item]]) -> None:
        session = t.new_session("items-rt")
        note(f"session {session!r}")
        with checking(items_round_trip_exactly, t.run) as check:
            sent: list[Item] = []
            for batch in batches:
                if not _add(check, session, t.store, copy.deepcopy(batch)):
                    return
                sent += batch
            expect(check, session, sent, read(check, t, session), batches=[len(b) for b in batches])

    example()


@clause(needs=NEEDS)
def items_keep_nul_characters(t: Target) -> None:
    """A NUL character (``\\x00``, valid in JSON text) comes back where it was: in text,
    in raw ``arguments``, in a key. Each case has its own session, and the other
    clauses use no NUL, so a backend that refuses NUL fails only here.

    Catches a ``jsonb`` column ("unsupported Unicode escape sequence"), Postgres
    ``text`` without escaping, C-string boundaries that cut at the NUL.
    """
    with checking(items_keep_nul_characters, t.run) as check:
        for i, item in enumerate(protocol(t).nul):
            session = t.new_session(f"items-nul{i}")
            if _add(check, session, t.store, [copy.deepcopy(item)], f"add_items() of {shorten(item, 60)}"):
                expect(check, session, [item], read(check, t, session))


@clause(needs=NEEDS, cost=1)
def large_items_round_trip(t: Target) -> None:
    """A 1 MiB item, 256 KiB of raw ``arguments`` and 2,000 items in one batch come back
    whole, and ``get_items(1)`` of those 2,000 is the last.

    Catches ``TEXT`` columns (64 KiB, and ``ensure_ascii`` JSON makes non-ASCII text 6x
    larger), ``VARCHAR(n)``, a driver's packet limit, a read capped at some page size.
    """
    big_text = ("é👍 and some ASCII text " * 47_000)[: 1 << 20]
    values = protocol(t)
    big_args = '{"rows": [' + ", ".join(f'{{"i": {i}, "v": "{"x" * 40}"}}' for i in range(4_500)) + "]}"
    cases: list[tuple[str, list[Item]]] = [
        ("a 1 MiB message", [{"role": "user", "content": big_text}]),
        ("256 KiB of arguments", [values.with_arguments(big_args[: 256 * 1024 - 2] + "]}")]),
        ("2,000 items", labelled("many", 2_000)),
    ]
    with checking(large_items_round_trip, t.run) as check:
        for label, items in cases:
            session = t.new_session("items-large")
            if not _add(check, session, t.store, items, f"add_items() of {label}"):
                continue
            got = read(check, t, session)
            if got is not RAISED and not same_items(items, got):
                sizes = [len(str(i)) for i in got] if isinstance(got, list) else got
                check.add(session, f"{label}: " + (describe_item(items[0], got[0]) if isinstance(got, list)
                          and len(got) == len(items) == 1 else f"{len(items)} item(s) added, "
                          f"{len(got) if isinstance(got, list) else got!r} came back"), got=sizes)
        last = read(check, t, session, limit=1) if values.limits else RAISED
        if last is not RAISED and not same_items(items[-1:], last):
            check.add(session, describe_limit(items, 1, last), expected=texts_of(items[-1:]), got=texts_of(last))


@clause(needs=NEEDS)
def items_keep_their_order(t: Target) -> None:
    """Items come back in the order added, within a batch and across batches (an empty
    batch adds nothing; identical items stay two items).

    Catches a read without ``ORDER BY`` (rows in whatever order the plan gives),
    ordering by a timestamp two writes can share, a set or a dict keyed by content.
    """
    session = t.new_session("items-order")
    twin: Item = {"role": "user", "content": "the same item twice"}
    batches: list[list[Item]] = [labelled("b0", 3), [], [twin, copy.deepcopy(twin)], labelled("b3", 1),
               [{"role": "assistant", "content": "z"}, {"role": "assistant", "content": "a"}], labelled("b5", 5)]
    with checking(items_keep_their_order, t.run) as check:
        added: list[Item] = []
        for n, batch in enumerate(batches):
            if not _add(check, session, t.store, copy.deepcopy(batch), f"add_items() #{n}"):
                return
            added += batch
            if not expect(check, session, added, read(check, t, session), f"after add_items() #{n}: ", short=True,
                          batches=[len(b) for b in batches[: n + 1]]):
                return


@clause(needs=NEEDS)
def get_items_gives_the_latest(t: Target) -> None:
    """``get_items(limit)`` returns the latest ``limit`` items, oldest of them first:
    ``[]`` for 0, the newest for 1, every item when the limit is the count or more,
    ``[]`` on an empty session.

    Catches ``ORDER BY id LIMIT n`` (the oldest items), ``ORDER BY id DESC LIMIT n``
    returned without reversing (newest first), ``LIMIT 0`` read as no limit, Redis
    ``LRANGE key 0 n`` where ``-n -1`` was meant.
    """
    session = t.new_session("items-limit")
    stored = labelled("limit", 5)
    with checking(get_items_gives_the_latest, t.run) as check:
        empty = t.new_session("items-limit-empty")
        for limit in (0, 1, 3):
            got = read(check, t, empty, limit=limit)
            if got is not RAISED and got != []:
                check.add(empty, f"get_items({limit}) on a session with no items returned {shorten(got)}, not []")
        if not _add(check, session, t.store, labelled("limit", 2)) or \
                not _add(check, session, t.store, labelled("limit", 3, start=2)):
            return
        for limit in (0, 1, 2, 3, 4, 5, 6, 50):
            got = read(check, t, session, limit=limit)
            want = stored[-limit:] if limit else []
            if got is not RAISED and not same_items(want, got):
                check.add(session, describe_limit(stored, limit, got), expected=texts_of(want), got=texts_of(got))
        expect(check, session, stored, read(check, t, session), "get_items() with no limit: ", short=True)


@clause(needs=NEEDS)
def pop_item_takes_the_newest(t: Target) -> None:
    """``pop_item`` removes and returns the newest item, then the one before, and
    ``None`` when the session is empty (or never used); ``get_items(1)`` after a pop is
    the new newest; adding after works as before.

    Catches a pop of the oldest item (``ORDER BY id`` without ``DESC``, ``LPOP`` for
    ``RPOP``), a pop that returns without removing (or removes without returning), an
    exception or ``{}`` on an empty session, and an item count kept for limited reads
    (``OFFSET count - limit``) that pops do not lower.
    """
    session = t.new_session("items-pop")
    stored = labelled("pop", 3)
    with checking(pop_item_takes_the_newest, t.run) as check:
        never = t.new_session("items-pop-never")
        got = check.call(never, "pop_item() on a session never used", t.store.call("pop_item", never))
        if got is not RAISED and got is not None:
            check.add(never, f"pop_item() on a session never used returned {shorten(got)}, not None")
        if not _add(check, session, t.store, copy.deepcopy(stored)):
            return
        for n in range(3, 0, -1):
            popped = check.call(session, "pop_item()", t.store.call("pop_item", session))
            if popped is RAISED:
                return
            if not same_value(stored[n - 1], popped):
                oldest = " (the oldest: pop takes the newest)" if same_value(stored[0], popped) else ""
                check.add(session, f"pop_item() returned {shorten(texts_of([popped])[0])}, not the newest item "
                          f"{stored[n - 1]['content']!r}{oldest}", expected=texts_of(stored[n - 1:n]),
                          got=texts_of([popped]))
                return
            if not expect(check, session, stored[: n - 1], read(check, t, session), "after pop_item(): ", short=True,
                          elsewhere={"this session before pop_item() took them": stored[n - 1:]}, expected=True):
                return
            if protocol(t).limits:  # a limited read after a pop: a stored count the pop left stale
                last = read(check, t, session, limit=1)
                if last is not RAISED and not same_items(stored[max(0, n - 2): n - 1], last):
                    check.add(session, "after pop_item(): " + describe_limit(stored[: n - 1], 1, last),
                              expected=texts_of(stored[max(0, n - 2): n - 1]), got=texts_of(last))
                    return
        for _ in range(2):
            popped = check.call(session, "pop_item() on an emptied session", t.store.call("pop_item", session))
            if popped is not RAISED and popped is not None:
                check.add(session, f"pop_item() on an emptied session returned {shorten(popped)}, not None")
        again = labelled("after-pop", 2)
        if _add(check, session, t.store, copy.deepcopy(again), "add_items() after popping everything"):
            expect(check, session, again, read(check, t, session), "after popping everything and adding: ", short=True)


@clause(needs=NEEDS)
def clear_session_empties_it(t: Target) -> None:
    """``clear_session`` removes every item of its session and nothing of any other,
    not even of an id the input model relates to it (``x/y``, ``x.y`` and ``x`` plus
    every other ASCII punctuation; ``A`` for ``%41``; ``case`` for ``Case``; ``w`` with
    whitespace around it); clearing a session never used raises nothing; adding after a
    clear works.

    Catches a clear that deletes by a pattern or prefix (``SCAN MATCH key*``, ``LIKE
    'x%'``, ``startswith`` under any separator: another session's items go too), a clear
    that decodes or lowercases the id, a clear that leaves a session row whose counter
    or cache serves stale items, an error on clearing what does not exist.
    """
    session, other = t.new_session("items-clear"), t.new_session("items-clear-other")
    with checking(clear_session_empties_it, t.run) as check:
        never = t.new_session("items-clear-never")
        check.call(never, "clear_session() on a session never used", t.store.call("clear_session", never))
        if not (_add(check, session, t.store, labelled("clear", 3)) and
                _add(check, other, t.store, labelled("keep", 2))):
            return
        if check.call(session, "clear_session()", t.store.call("clear_session", session)) is RAISED:
            return
        before = {"this session before its clear": labelled("clear", 3)}
        expect(check, session, [], read(check, t, session), "after clear_session(): ", short=True, elsewhere=before)
        expect(check, other, labelled("keep", 2), read(check, t, other),
               "clearing another session changed this one: ", short=True, expected=True)
        popped = check.call(session, "pop_item() after a clear", t.store.call("pop_item", session)) \
            if protocol(t).pops else None
        if popped is not RAISED and popped is not None:
            check.add(session, f"pop_item() after clear_session() returned {shorten(popped)}, not None")
        if _add(check, session, t.store, labelled("after-clear", 2), "add_items() after a clear"):
            expect(check, session, labelled("after-clear", 2), read(check, t, session),
                   "after a clear and an add: ", short=True, elsewhere=before)
    _clear_leaves_related_ids(t)


def _clear_leaves_related_ids(t: Target) -> None:
    """Clear one side of every relation of the input model (``x``, the first side of
    each escape pair, ``Case``, ``w``): the other side (``x<c>y`` for each punctuation
    ``c``, the pair's second side, ``case``, ``w`` with whitespace around it) keeps its
    items. Ids the store refuses, or merges with another (the isolation clause's
    failures), are left out."""
    relations = inputs.clear_relations(t.new_session("items-clear-rel-"))
    ids = list(dict.fromkeys(s for r in relations for s in (r.cleared, r.kept)))
    apart = []
    for i, session in enumerate(ids):
        try:
            t.run(t.store.call("add_items", session, _marked(i)))
        except Exception:
            continue  # refused: a limit, the isolation clause's to report
        apart.append(session)
    apart = [s for s in apart if _holds_own(t, s, ids.index(s))]
    with checking(clear_session_empties_it, t.run) as check:
        _clear_related(check, t, relations, {s: ids.index(s) for s in apart})


def _holds_own(t: Target, session: str, i: int) -> bool:
    try:
        return same_items(_marked(i), t.run(t.store.call("get_items", session)))
    except Exception:
        return False


def _clear_related(check: Check, t: Target, relations: list[inputs.Related], apart: dict[str, int]) -> None:
    """Clear each ``cleared`` id of ``relations`` in ``apart`` (id: the ``i`` of the
    :func:`_marked` items it holds), reading the ids it relates to right after, so a
    kept id changed is named with the clear that changed it and the relation; then read
    every id of ``apart`` once more: a cleared one empty, a kept one whole."""
    changed: set[str] = set()
    cleared = [s for s in dict.fromkeys(r.cleared for r in relations) if s in apart]
    for session in cleared:
        if check.call(session, "clear_session()", t.store.call("clear_session", session)) is RAISED:
            return
        for r in relations:
            if r.cleared != session or r.kept not in apart or r.kept in changed:
                continue
            want = _marked(apart[r.kept])
            got = read(check, t, r.kept)
            if got is not RAISED and not same_items(want, got):
                changed.add(r.kept)
                check.add(r.kept, f"clearing another session changed this one: clear_session({session!r}) took the "
                          f"items of {r.kept!r} ({r.relation}): {r.describe()}", texts_of(want), texts_of(got))
    for session, i in apart.items():
        if session in changed:
            continue
        want = [] if session in cleared else _marked(i)
        got = read(check, t, session)
        if got is not RAISED and not same_items(want, got):
            expect(check, session, want, got, "after clear_session(): " if not want else
                   "clearing other sessions changed this one: ", short=True)


@clause(needs=NEEDS)
def never_used_item_session_is_empty(t: Target) -> None:
    """A session never used has no items: ``get_items()`` and ``get_items(n)`` give
    ``[]`` and ``pop_item()`` gives ``None``, not an error, and reading it creates
    nothing another session sees.

    Catches a lookup of the session row that raises when it is missing, and a read
    that returns ``None`` instead of a list.
    """
    values = protocol(t)
    with checking(never_used_item_session_is_empty, t.run) as check:
        for limit in (None, 5) if values.limits else (None,):
            session = t.new_session("items-unknown")
            got = read(check, t, session, limit=limit)
            if got is not RAISED and (not isinstance(got, list) or got):
                check.add(session, f"a session never used gave {shorten(got)}, not []")
        session = t.new_session("items-unknown")
        popped = check.call(session, "pop_item()", t.store.call("pop_item", session)) if values.pops else None
        if popped is not RAISED and popped is not None:
            check.add(session, f"pop_item() on a session never used gave {shorten(popped)}, not None")


@clause(needs=NEEDS)
def item_sessions_are_isolated(t: Target) -> None:
    """Sessions never see each other's items, however alike their ids: those of the
    transcript clauses (case, trailing spaces, NFC vs NFD, SQL wildcards, a NUL, past
    the 64th character, 512 bytes) and a key scheme's (``x`` and ``x:messages``, glob
    characters ``* ? [ ]``, braces). An id the backend cannot hold may be refused: an
    exception before anything is written, the handle still usable after, is a *limit*
    listed in the report; a refusal that writes part or breaks the handle is a failure.

    Clearing ``x`` then leaves every other of these ids whole (``x:messages``, ``x*``,
    ``xa``, ``x/y``, ``x.y``, ...).

    Catches case- and accent-insensitive collations (MariaDB's default), PAD SPACE,
    ``LIKE``, ids truncated to a key length, Redis keys ``prefix:id`` /
    ``prefix:id:messages``, a ``KEYS prefix:id*`` clear.
    """
    # Twice, the second time in reverse order under another prefix: an id refused in one
    # order only is refused because of another session (x:messages after x), not a limit.
    passes = []
    for backwards in (False, True):
        prefix = t.new_session("items-iso-")
        suffixes = list(dict.fromkeys([*(i.removeprefix(prefix) for i in confusable_ids(prefix)),
                                       *strategies.KEY_SCHEME_SUFFIXES]))
        passes.append((prefix, suffixes[::-1] if backwards else suffixes))
    refused = [_isolation(t, [prefix + s for s in suffixes], item_sessions_are_isolated, limits=n == 0)
               for n, (prefix, suffixes) in enumerate(passes)]
    mapped = getattr(t.store.raw, "storetest_id_limit", "")  # ids the binding's opener maps (UUIDs only)
    if mapped:
        t.limits.append(mapped)
    with checking(item_sessions_are_isolated, t.run) as check:
        (one, first), (two, _) = passes
        for suffix in sorted(set(first) - {s for s in first if (one + s in refused[0]) == (two + s in refused[1])}):
            by, alone = (one + suffix, two + suffix) if one + suffix in refused[0] else (two + suffix, one + suffix)
            check.add(by, f"session id {by!r} was refused only when other sessions existed (it works when added "
                      f"earlier: {alone!r}); its keys collide with another session's: "
                      + describe_item_id_merge(suffix, next((s for s in first if s != suffix and (
                          s.startswith(suffix + ":") or suffix.startswith(s + ":"))), suffix + ":?")))
    if protocol(t).clears:
        _clear_leaves_the_others(t, one, first, refused[0])


def _clear_leaves_the_others(t: Target, prefix: str, suffixes: list[str], refused: set[str]) -> None:
    """Clear ``x`` of the key-scheme ids: every other id that held its own items still does."""
    ids = [prefix + s for s in suffixes]
    gone = prefix + "x"
    apart = [s for i, s in enumerate(ids) if s not in refused and _holds_own(t, s, i)]
    if gone not in apart:
        return
    with checking(item_sessions_are_isolated, t.run) as check:
        if check.call(gone, "clear_session()", t.store.call("clear_session", gone)) is RAISED:
            return
        for session in apart:
            want = [] if session == gone else _marked(ids.index(session))
            got = read(check, t, session)
            if got is RAISED or same_items(want, got):
                continue
            if want:
                check.add(session, f"clearing another session changed this one: clear_session({gone!r}) took the "
                          f"items of {session!r}: " + describe_item_id_merge(gone, session), texts_of(want),
                          texts_of(got))
            else:
                expect(check, session, want, got, "after clear_session(): ", short=True)


def _isolation(t: Target, ids: list[str], clause_fn: Any, limits: bool = True) -> set[str]:
    """Each id's own items and no other's; the ids refused cleanly are returned (and,
    with ``limits``, listed in ``t.limits``)."""
    owner = {f"added to session #{i}": i for i in range(len(ids))}
    refused: dict[str, list[str]] = {}
    with checking(clause_fn, t.run) as check:
        usable = [_try_id(check, t, session, i, refused) for i, session in enumerate(ids)]
        for i, session in enumerate(ids):
            if not usable[i]:
                continue
            want = _marked(i)
            got = read(check, t, session)
            if got is RAISED or same_items(want, got):
                continue
            others = sorted({owner[x] for x in texts_of(got) if isinstance(x, str) and x in owner} - {i})
            added = [j for j in range(len(ids)) if usable[j] and j != i]
            if len(added) > 2 and set(others) >= set(added):
                check.add(session, f"every session holds the items of every other: {session!r} holds what was "
                          f"added to all {len(added)} other sessions, whatever their ids (one history for every "
                          "session: a class attribute or module-level list shared by every instance, or a key "
                          "that leaves the id out)", expected=texts_of(want), got=texts_of(got))
            elif others:
                check.add(session, f"sessions share items: {session!r} holds what was added to "
                          f"{ids[others[0]]!r}: " + describe_item_id_merge(session, ids[others[0]]),
                          expected=texts_of(want), got=texts_of(got))
            else:
                expect(check, session, want, got, short=True)
        for reason, which in refused.items() if limits else ():
            t.limits.append(f"{len(which)} session id(s) refused ({reason}): " + ", ".join(
                shorten(s, 40) for s in which[:6]) + (" ..." if len(which) > 6 else ""))
    return {s for which in refused.values() for s in which}


def _marked(i: int) -> list[Item]:
    return [{"role": "user", "content": f"added to session #{i}"}, {"role": "assistant", "content": f"#{i} ok"}]


def _try_id(check: Check, t: Target, session: str, i: int, refused: dict[str, list[str]]) -> bool:
    """Add session ``i``'s items; a refusal is a limit if it wrote nothing and the handle
    still works, else a violation. Whether the id is usable."""
    try:
        t.run(t.store.call("add_items", session, _marked(i)))
        return True
    except Exception as exc:
        error = describe_exception(exc)
    try:
        after = t.run(t.store.call("get_items", session))
    except Exception:
        after = []
    if isinstance(after, list) and after:
        check.add(session, f"add_items() raised {error} and still wrote {len(after)} of its 2 items "
                  "(a refusal must write nothing)", texts_of(_marked(i)), texts_of(after))
        return False
    probe = t.new_session("items-iso-probe")
    try:
        t.run(t.store.call("add_items", probe, _marked(i)))
        healthy = same_items(_marked(i), t.run(t.store.call("get_items", probe)))
        trouble = "" if healthy else "its items came back changed"
    except Exception as exc:
        trouble = describe_exception(exc)
    if trouble:
        check.add(session, f"refusing session id {session!r} ({error}) left the handle unusable: the next "
                  f"session's add and read failed ({trouble}); roll back the failed transaction")
        return False
    refused.setdefault(error.split(":")[0], []).append(session)
    return False


@clause(needs=NEEDS)
def items_are_not_aliased(t: Target) -> None:
    """What a caller passed to ``add_items`` or got from ``get_items``/``pop_item`` is
    the caller's: changing the list or an item afterwards changes nothing stored.

    Catches an in-memory or caching store that keeps the caller's list or dicts, or
    hands out its own (``return self._items``).
    """
    session = t.new_session("items-alias")
    values = protocol(t)
    with checking(items_are_not_aliased, t.run) as check:
        passed = labelled("alias", 3)
        if not _add(check, session, t.store, passed):
            return
        values.tamper(t.store.raw, session, passed, "add_items()")
        want = labelled("alias", 3)
        if not expect(check, session, want, read(check, t, session),
                      "the caller changing what it passed to add_items() changed the store: ", short=True):
            return
        for limit in (None, 2) if values.limits else (None,):
            got = read(check, t, session, limit=limit)
            if isinstance(got, list):
                values.tamper(t.store.raw, session, got, "get_items()")
            expect(check, session, want, read(check, t, session),
                   "the caller changing what get_items() returned changed the store: ", short=True)
        if values.pops:
            popped = check.call(session, "pop_item()", t.store.call("pop_item", session))
            if isinstance(popped, dict):
                values.tamper(t.store.raw, session, popped, "pop_item()")
        empty = t.new_session("items-alias-empty")
        got = read(check, t, empty)
        if isinstance(got, list):
            values.tamper(t.store.raw, empty, got, "get_items() of an unused session")
        expect(check, empty, [], read(check, t, empty), "appending to the [] of an unused session changed it: ",
               short=True)
        if values.pops:
            expect(check, session, want[:2], read(check, t, session), "after pop_item(): ", short=True, expected=True)


@clause(needs=NEEDS, replica=True)
def item_replicas_see_each_others_writes(t: Target) -> None:
    """What one handle adds, pops or clears, another handle on the same backend sees at
    once, even after it has read the session before.

    Catches a per-handle cache of the items kept up to date with its own writes only,
    a per-process counter of item ids, and a history kept in process memory.
    """
    assert t.replica is not None
    one, two = t.store, t.replica
    session = t.new_session("items-replicas")
    with checking(item_replicas_see_each_others_writes, t.run) as check:
        held: list[Item] = []
        for n, (writer, reader) in enumerate([(two, one), (one, two), (two, one)]):
            read(check, t, session, reader)
            batch = labelled(f"through-{writer.label.split()[0]}-{n}", 2)
            if not _add(check, session, writer, batch):
                return
            held += batch
            if not expect(check, session, held, read(check, t, session, reader),
                          f"what the {writer.label} added, read through the {reader.label}: ", short=True):
                return
        if not protocol(t).clears:
            return
        if not protocol(t).pops:
            held.clear()
            if check.call(session, f"clear_session() through the {two.label}",
                          two.call("clear_session", session)) is not RAISED:
                expect(check, session, [], read(check, t, session, one),
                       f"after a clear through the {two.label}, read through the {one.label}: ", short=True)
            return
        popped = check.call(session, f"pop_item() through the {one.label}", one.call("pop_item", session))
        if popped is not RAISED and not same_value(held[-1], popped):
            check.add(session, f"pop_item() through the {one.label} did not take the newest item, added through "
                      f"the {two.label}", expected=texts_of(held[-1:]), got=texts_of([popped]))
        held.pop()
        if not expect(check, session, held, read(check, t, session, two),
                      f"after a pop through the {one.label}, read through the {two.label}: ", short=True):
            return
        if check.call(session, f"clear_session() through the {two.label}", two.call("clear_session", session)) \
                is not RAISED:
            expect(check, session, [], read(check, t, session, one),
                   f"after a clear through the {two.label}, read through the {one.label}: ", short=True)
