"""LlamaIndex chat stores (the ``llama_index`` capability, which
:func:`storetest.bindings.llama_index` gives): what the protocol promises beyond an item
history. ``delete_message(key, idx)`` removes and returns that one message;
``get_keys`` lists the keys holding messages written through this store, and no other;
``set_messages`` replaces the list (and, beyond the promise, at once); an
``AsyncDBChatStore``'s queue (``llama_index_db``): ``count_messages``,
``delete_oldest_messages``, ``archive_oldest_messages``.

The item clauses run on the same stores (``pop_item`` is ``delete_last_message``).

Real bugs behind these clauses: ``RedisChatStore.get_keys`` as ``KEYS *`` (every key of
the database, other applications' included); ``RedisChatStore.delete_message``
rewriting the list with ``LPUSH`` (reversed) and returning raw bytes; ``set_messages``
as a delete, then one insert per message, in separate commits.
"""

from __future__ import annotations

import asyncio
from typing import Any

from storetest._engine import inputs
from storetest._engine.diagnosis import shorten
from storetest._engine.failures import RAISED, Check, checking
from storetest._engine.harness import Handle, Target
from storetest.clauses._item_support import expect, labelled, protocol, read, texts_of
from storetest.clauses._registry import clause
from storetest.items import Item, same_items, same_value

NEEDS = ("items", "llama_index")
DB = ("items", "llama_index", "llama_index_db")


def _add(check: Check, t: Target, key: str, items: list[Item]) -> bool:
    return check.call(key, "add_items()", t.store.call("add_items", key, items)) is not RAISED


def _db(t: Target) -> bool:
    return "llama_index_db" in t.store.capabilities


def _delete_at(check: Check, t: Target, idx: int, stored: list[Item], allowed: list[int]) -> None:
    """``delete_message(key, idx)`` on a key holding ``stored``: the message at one of
    ``allowed`` (positions; none: out of range) removed and returned, nothing else."""
    key = t.new_session(f"del{idx}")
    if not _add(check, t, key, stored):
        return
    got = check.call(key, f"delete_message({idx})", t.store.call("delete_message", key, idx))
    if got is RAISED:
        return
    left = read(check, t, key)
    if left is RAISED:
        return
    outcomes: list[tuple[Item | None, list[Item]]] = [(stored[i], stored[:i] + stored[i + 1:]) for i in allowed]
    outcomes = outcomes or [(None, stored)]
    if any(same_value(want, got) and same_items(rest, left) for want, rest in outcomes):
        return
    want_returned, want_left = outcomes[0]
    said = "out of range: None, nothing removed" if not allowed else f"message {allowed[0]} removed and returned"
    check.add(key, f"delete_message(key, {idx}) on {len(stored)} messages ({said}) returned "
              f"{shorten(texts_of([got])[0] if isinstance(got, dict) else got, 80)} and left {len(left)} message(s)",
              [texts_of([want_returned])[0] if want_returned else None, texts_of(want_left)],
              [texts_of([got])[0] if isinstance(got, dict) else got, texts_of(left)])


@clause(needs=NEEDS)
def delete_message_removes_that_one(t: Target) -> None:
    """``delete_message(key, idx)`` removes the message at ``idx`` (counted from the
    start) and returns it, leaving the others in order; an index past the end returns
    ``None`` and removes nothing, as does a key never used. (An ``AsyncDBChatStore``
    deletes by row id, which its API never shows: there, any message it removes is the
    one it returns, and nothing else goes.)

    Catches a list rewritten with ``LPUSH`` after the delete (the rest reversed), raw
    bytes returned for a message, an index off by one, a delete without the key in its
    ``WHERE``.
    """
    stored = labelled("m", 5)
    with checking(delete_message_removes_that_one, t.run) as check:
        never = t.new_session("del-never")
        got = check.call(never, "delete_message() on a key never used", t.store.call("delete_message", never, 0))
        if got is not RAISED and got is not None:
            check.add(never, f"delete_message(key, 0) on a key never used returned {shorten(got)}, not None")
        if _db(t):
            _by_id(check, t, stored)
            return
        for idx, allowed in ((0, [0]), (2, [2]), (4, [4]), (5, []), (99, [])):
            _delete_at(check, t, idx, stored, allowed)


@clause(needs=NEEDS)
def delete_message_with_a_negative_index(t: Target) -> None:
    """``delete_message(key, idx)`` with ``idx < 0`` answers one of the ways Python
    would: ``None`` with nothing removed, or the message counted from the end removed
    and returned (``-len - 1`` and below: ``None``). LlamaIndex does not say which
    (``SimpleChatStore`` counts from the end, the SQL and Redis stores answer ``None``),
    so a failure here is beyond the protocol's promise.

    Catches ``list.pop(idx)`` raising ``IndexError`` for an index below ``-len``, an
    SQL array slice that treats a negative index as a position, a negative id matched.
    """
    stored = labelled("m", 5)
    with checking(delete_message_with_a_negative_index, t.run) as check:
        for idx, answer in ((-1, 4), (-5, 0), (-6, None)):
            _negative(check, t, idx, stored, None if _db(t) else answer)


def _negative(check: Check, t: Target, idx: int, stored: list[Item], answer: int | None) -> None:
    key = t.new_session(f"del{idx}")
    if not _add(check, t, key, stored):
        return
    got = check.call(key, f"delete_message({idx})", t.store.call("delete_message", key, idx))
    left = read(check, t, key)
    if got is RAISED or left is RAISED:
        return
    fine: list[tuple[Item | None, list[Item]]] = [(None, stored)]
    if answer is not None:
        fine.append((stored[answer], stored[:answer] + stored[answer + 1:]))
    if not any(same_value(want, got) and same_items(rest, left) for want, rest in fine):
        check.add(key, f"delete_message(key, {idx}) on {len(stored)} messages returned "
                  f"{shorten(got, 80)} and left {len(left)} message(s): neither None with nothing removed nor "
                  "the message counted from the end removed and returned", texts_of(stored), texts_of(left))


def _by_id(check: Check, t: Target, stored: list[Item]) -> None:
    key, other = t.new_session("del-db"), t.new_session("del-db-other")
    if not (_add(check, t, key, stored) and _add(check, t, other, labelled("other", 3))):
        return
    left = list(stored)
    for idx in (0, 1, 2, 3, -1, 2**31 - 1):
        got = check.call(key, f"delete_message({idx})", t.store.call("delete_message", key, idx))
        now = read(check, t, key)
        if got is RAISED or now is RAISED:
            return
        want = [x for x in left if not same_value(x, got)] if got is not None else left
        if (got is not None and len(want) != len(left) - 1) or not same_items(want, now):
            check.add(key, f"delete_message(key, {idx}) returned {shorten(got, 80)}: the messages left are not the "
                      "ones before less the one returned", texts_of(want), texts_of(now))
            return
        left = want
    expect(check, other, labelled("other", 3), read(check, t, other), "another key, after delete_message(): ",
           short=True)


@clause(needs=NEEDS)
def get_keys_lists_the_keys_written(t: Target) -> None:
    """``get_keys`` lists every key that holds messages written through this store,
    once each and as the ``str`` it was written under (keys with every ASCII punctuation,
    escapes, whitespace and character families of the input-space model), and no key
    whose messages ``delete_messages`` removed, nor another application's (``neighbour=``)
    on the same backend.

    Catches ``KEYS *`` (every key of the Redis database), keys returned as ``bytes``, a
    delete that leaves an empty list under its key, a key column that merges case or
    trailing spaces.
    """
    marker = t.new_session("keys")
    # Every separator and escape pair of the model; one in three of its whitespace and character families.
    ids = inputs.related_ids(marker)
    every = ids.index(f"{marker}w")  # where the whitespace relations start
    keys = [k for k in ids[:every] + ids[every::3] if "\x00" not in k]
    written, deleted = keys[::3] + keys[1::3], keys[2::3]
    with checking(get_keys_lists_the_keys_written, t.run) as check:
        for key in keys:
            if not _add(check, t, key, labelled("k", 1)):
                return
        for key in deleted:
            if check.call(key, "delete_messages()", t.store.call("clear_session", key)) is RAISED:
                return
        theirs = [f"{marker}-neighbour{i}" for i in range(3)]
        has_neighbour = getattr(t.store.raw, "neighbour", None) is not None
        for key in theirs if has_neighbour else ():
            if check.call(key, "add_message() through the neighbour", t.store.call(
                    "add_as_neighbour", key, labelled("n", 1))) is RAISED:
                return
        got = check.call(marker, "get_keys()", t.store.call("get_keys"))
        if got is RAISED:
            return
        if not isinstance(got, list) or not all(isinstance(k, str) for k in got):
            check.add(marker, f"get_keys() returned {shorten(got, 120)}, not a list of str")
            return
        mine = [k for k in got if marker in k]
        missing = [k for k in written if k not in mine]
        if missing:
            check.add(marker, f"get_keys() does not list {len(missing)} of the {len(written)} keys holding messages",
                      missing[:5], mine[:5])
        dropped = [k for k in deleted if k in mine]
        if dropped:
            check.add(marker, f"get_keys() lists {len(dropped)} key(s) whose messages delete_messages() removed",
                      [], dropped[:5])
        foreign = [k for k in theirs if k in mine]
        if foreign:
            check.add(marker, f"get_keys() lists {len(foreign)} key(s) another application's store wrote on the "
                      "same backend (neighbour=): it lists the backend's keys, not this store's", [], foreign)
        twice = sorted({k for k in mine if mine.count(k) > 1})
        if twice:
            check.add(marker, f"get_keys() lists {len(twice)} key(s) more than once", [], twice[:5])


@clause(needs=NEEDS)
def set_messages_replaces_the_list(t: Target) -> None:
    """``set_messages(key, messages)`` leaves exactly ``messages`` under the key (every
    block kind, role and tool call of the corpus), over a list or on a key never used;
    ``set_messages(key, [])`` leaves it empty; other keys are untouched.

    Catches a set that appends, one that keeps the old list's tail, a set that skips an
    empty list, a set written under a key the store rewrote.
    """
    corpus = list(protocol(t).corpus)
    with checking(set_messages_replaces_the_list, t.run) as check:
        key, other = t.new_session("set"), t.new_session("set-other")
        if not (_add(check, t, key, labelled("old", 4)) and _add(check, t, other, labelled("other", 2))):
            return
        for what, new in (("a shorter list", labelled("new", 2)), ("the corpus", corpus), ("[]", [])):
            if check.call(key, f"set_messages() of {what}", t.store.call("set_messages", key, new)) is RAISED:
                return
            if not expect(check, key, new, read(check, t, key), f"after set_messages() of {what}: "):
                return
        fresh = t.new_session("set-fresh")
        if check.call(fresh, "set_messages()", t.store.call("set_messages", fresh, labelled("fresh", 2))) is RAISED:
            return
        expect(check, fresh, labelled("fresh", 2), read(check, t, fresh), "set_messages() on a key never used: ",
               short=True)
        expect(check, other, labelled("other", 2), read(check, t, other), "another key, after set_messages(): ",
               short=True)


@clause(needs=NEEDS, races=True)
def set_messages_is_atomic_to_readers(t: Target) -> None:
    """A reader racing ``set_messages`` sees the old list or the new one, whole, never
    an empty or partial list in between; replicas setting at once leave one of the lists.

    Catches ``set_messages`` as ``DELETE`` then one ``INSERT`` (or ``RPUSH``) per message
    in separate commits (``SQLAlchemyChatStore``, ``RedisChatStore``).
    """
    handles = t.handles()
    with checking(set_messages_is_atomic_to_readers, t.run) as check:
        # One round caught set_messages in steps on 86 of 100 seeds (scripts/race_rounds.py
        # --seeds 100): a reader must land between its steps. Three times the rounds.
        for round_ in range(3 * t.profile.race_rounds):
            t.tick()
            key = t.new_session(f"set-race{round_}")
            lists = [labelled("old", 4), labelled("a", 3), labelled("b", 5)]
            if check.call(key, "set_messages()", t.store.call("set_messages", key, lists[0])) is RAISED:
                return
            seen: list[object] = []
            setting = [2]  # setters not yet returned: the readers read until both have
            calls = [_setter(handles[0], key, lists[1], setting), _setter(handles[-1], key, lists[2], setting),
                     _reader(handles[0], key, seen, setting), _reader(handles[-1], key, seen, setting)]
            t.rng.shuffle(calls)
            try:
                t.race(calls)
            except Exception as exc:
                check.add(key, f"set_messages() racing get_messages() raised {type(exc).__name__}: {exc}")
                return
            final = read(check, t, key)
            for view in [*seen, *([] if final is RAISED else [final])]:
                if not any(same_items(x, view) for x in lists):
                    check.add(key, "a reader racing set_messages() saw neither the old list nor a new one: the "
                              "list is replaced in several writes (a delete, then message by message)",
                              [texts_of(x) for x in lists], texts_of(view))
                    return


def _setter(handle: Handle, key: str, which: list[Item], setting: list[int]) -> Any:
    async def run() -> None:
        try:
            await handle.call("set_messages", key, which)
        finally:
            setting[0] -= 1
    return run


def _reader(handle: Handle, key: str, seen: list[object], setting: list[int]) -> Any:
    """Reads at least 4 times, and on while a setter is under way (up to 200): a set in
    steps is read between its steps however the threads are scheduled (4 reads alone
    missed it on 1 seed in 20 of a loaded test run)."""
    async def run() -> None:
        for n in range(200):
            seen.append(await handle.call("get_items", key))
            await asyncio.sleep(0)  # let the setters on between reads
            if n >= 3 and setting[0] <= 0:
                break
    return run


@clause(needs=DB)
def count_messages_counts_each_status(t: Target) -> None:
    """``count_messages(key)`` is the number of active messages ``get_messages`` returns,
    and ``count_messages(key, ARCHIVED)`` the number archived, after adds, archives and
    deletes of the oldest; a key never used counts 0.

    Catches a count without the status in its ``WHERE`` (archived counted as active), a
    count of another key's rows, a count cached from before a write.
    """
    key = t.new_session("count")
    with checking(count_messages_counts_each_status, t.run) as check:
        steps: list[tuple[str, Any, int, int]] = [
            ("nothing yet", None, 0, 0), ("adding 6", ("add_items", key, labelled("c", 6)), 6, 0),
            ("archiving the oldest 2", ("archive_oldest_messages", key, 2), 4, 2),
            ("deleting the oldest 1", ("delete_oldest_messages", key, 1), 3, 2)]
        for what, call, active, archived in steps:
            if call is not None and check.call(key, what, t.store.call(*call)) is RAISED:
                return
            for status, want in (("active", active), ("archived", archived)):
                got = check.call(key, f"count_messages({status})", t.store.call(
                    "count_messages", key, status == "archived"))
                if got is not RAISED and got != want:
                    check.add(key, f"after {what}, count_messages(key, {status.upper()}) is {got!r}, not {want}",
                              want, got)
                    return


@clause(needs=DB)
def oldest_messages_leave_first(t: Target) -> None:
    """``delete_oldest_messages(key, n)`` and ``archive_oldest_messages(key, n)`` take
    the ``n`` oldest active messages, return them oldest first, and leave the rest in
    order; an archived message is no longer returned by ``get_messages`` but is by
    ``get_messages(key, ARCHIVED)``; ``n`` past the end takes what there is; other keys
    are untouched.

    Catches an ``ORDER BY`` without the tiebreak or in the wrong direction (the newest
    taken), an archive that changes nothing a reader sees, a limit applied before the
    key or status filter.
    """
    stored = labelled("q", 7)
    key, other = t.new_session("oldest"), t.new_session("oldest-other")
    with checking(oldest_messages_leave_first, t.run) as check:
        if not (_add(check, t, key, stored) and _add(check, t, other, labelled("other", 3))):
            return
        archived: list[Item] = []
        left = list(stored)
        for call, n in (("delete_oldest_messages", 2), ("archive_oldest_messages", 2),
                        ("delete_oldest_messages", 0), ("archive_oldest_messages", 9)):
            got = check.call(key, f"{call}({n})", t.store.call(call, key, n))
            if got is RAISED:
                return
            taken, left = left[:n], left[n:]
            if not expect(check, key, taken, got, f"{call}(key, {n}) returned: ", short=True):
                return
            archived += taken if call.startswith("archive") else []
            if not expect(check, key, left, read(check, t, key), f"after {call}(key, {n}), get_messages(): ",
                          short=True):
                return
            if not expect(check, key, archived, check.call(key, "get_messages(ARCHIVED)", t.store.call(
                    "archived_items", key)), f"after {call}(key, {n}), get_messages(key, ARCHIVED): ", short=True):
                return
        expect(check, other, labelled("other", 3), read(check, t, other), "another key: ", short=True)
