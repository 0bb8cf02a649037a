"""The incremental-save core: what a save reads, encodes and writes, for the handle that
wrote last and for one that did not. The planner alone, then on a real SQLite file."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import sqlite3
import threading
from collections import UserList
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from reference_stores import _incremental
from reference_stores._incremental import (
    DIGEST_SIZE,
    Known,
    Remembered,
    SavePlan,
    chain_digest,
    chain_digests,
    encoded,
    row_text,
)
from reference_stores.sqlite import SQLiteStore
from storetest._engine import strategies
from storetest.codec import encode_message
from storetest.contract import Message, Text, ToolCall, ToolResult


def turn(i: int, tag: str = "") -> Message:
    return Message.text("user" if i % 2 else "assistant", f"turn {i}{tag}: " + "x" * 40)


def conversation(n: int, tag: str = "") -> list[Message]:
    return [turn(i, tag) for i in range(n)]


def stored_rows(messages: list[Message]) -> list[tuple[int, bytes]]:
    """The (position, digest) rows a store holds for ``messages``."""
    digests = chain_digests(b"", [row_text(m) for m in messages])
    return [(i, digests[i * DIGEST_SIZE : (i + 1) * DIGEST_SIZE]) for i in range(len(messages))]


def known(version: int, messages: list[Message]) -> Known:
    return Known(version, tuple(messages), b"".join(d for _, d in stored_rows(messages)))


def remembering(messages: list[Message]) -> Remembered:
    """A handle's memory as a save of ``messages`` at version 1 leaves it: list and
    bytearray buffers the next save extends in place."""
    memory = Remembered()
    memory.learn(b"s", Known(1, list(messages), bytearray(b"".join(d for _, d in stored_rows(messages)))))
    return memory


def planned(new: list[Message], memory: Known | None, stored_version: int | None) -> SavePlan:
    """A plan as a store makes one: prepared from what the handle remembers, then
    started with the version read under the session's lock."""
    remembered = Remembered()
    if memory is not None:
        remembered.learn(b"s", memory)
    plan = remembered.prepare(b"s", new)
    plan.start(stored_version)
    return plan


class Counted:
    """Counts the row texts the core makes (each message encoded) and the hashes, while a
    test runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.encoded = 0
        self.hashed = 0

        def encode(message: Message) -> str:
            self.encoded += 1
            return row_text(message)

        def digest(previous: bytes, body: str) -> bytes:
            self.hashed += 1
            return chain_digest(previous, body)

        monkeypatch.setattr(_incremental, "row_text", encode)
        monkeypatch.setattr(_incremental, "chain_digest", digest)

    def reset(self) -> None:
        self.encoded = self.hashed = 0


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(monkeypatch)


# -- the digest ------------------------------------------------------------------------


def test_the_stored_digest_and_row_texts_are_as_documented() -> None:
    """What stores keep, pinned: a chain digest is BLAKE2b-256 of the previous one and
    the row text's UTF-8, and the common messages' row texts are the forms the module
    names. A faster way of computing either must not change a stored byte."""
    text = Message.text("user", "hé")
    call = Message("assistant", (ToolCall("c1", "lookup", '{"q": 1}'),))
    result = Message("tool", (ToolResult("c1", "found", is_error=True),))
    assert [row_text(m) for m in (text, call, result)] == [
        "user:hé", '{!assistant:2:6:c1lookup{"q": 1}', "{?tool:2:1:c1found"]
    previous = b"\x01" * DIGEST_SIZE
    assert chain_digest(previous, "user:hé") == hashlib.blake2b(
        previous + "user:hé".encode(), digest_size=32).digest()
    assert chain_digest(bytearray(previous), "x") == hashlib.blake2b(previous + b"x", digest_size=32).digest()
    first = hashlib.blake2b(b"a", digest_size=32).digest()
    assert chain_digests(b"", ["a", "b"]) == first + hashlib.blake2b(first + b"b", digest_size=32).digest()


def test_a_chain_digest_vouches_for_the_whole_prefix() -> None:
    """Rows that differ anywhere before position i give different digests at i."""
    a = stored_rows(conversation(5))
    b = stored_rows([*conversation(1), turn(1, "edited"), *conversation(5)[2:]])
    assert a[0] == b[0]
    assert all(x[1] != y[1] for x, y in zip(a[1:], b[1:], strict=True))
    assert len(a[4][1]) == DIGEST_SIZE


@given(strategies.messages, strategies.messages)
def test_two_messages_have_one_row_text_only_when_equal(a: Message, b: Message) -> None:
    assert (row_text(a) == row_text(b)) == (a == b)
    for m in (a, b):
        assert encoded(m, row_text(m)) == encode_message(m)


def test_row_texts_keep_confusable_messages_apart() -> None:
    """The forms count what they join: ids and names with colons and digits in them, the
    forms' own openings as text, and a message of several parts (its codec JSON)."""
    confusable = [
        Message("assistant", (ToolCall("a:1", "b", "{}"),)),
        Message("assistant", (ToolCall("a", ":1b", "{}"),)),
        Message("assistant", (ToolCall("a", "", ":1b{}"),)),
        Message("tool", (ToolResult("1:0", "x"),)),
        Message("tool", (ToolResult("1", "0:x"),)),
        Message("tool", (ToolResult("1", "0:x", True),)),
        Message.text("user", "{!user:1:1:ab{}"),
        Message.text("user", ""),
        Message("user", ()),
        Message("user", (Text("a"), Text("b"))),
        Message("user", (Text("ab"),)),
    ]
    texts = [row_text(m) for m in confusable]
    assert len(set(texts)) == len(texts), texts
    assert row_text(confusable[-2]) == encode_message(confusable[-2]) and texts[-2].startswith('{"')
    assert not any(t.startswith('{"') for t in texts[:8] + texts[-1:])


# -- the planner -------------------------------------------------------------------------


def test_matching_version_reads_nothing_and_writes_the_tail(counted: Counted) -> None:
    old = conversation(100)
    memory = known(7, old)
    counted.reset()
    plan = planned([*old, turn(100)], memory, 7)
    assert plan.fetch_from is None
    assert (plan.keep, plan.delete, [p for p, _, _ in plan.rows]) == (100, False, [100])
    assert (counted.encoded, counted.hashed) == (1, 1)
    assert plan.known(8).digests == b"".join(d for _, d in stored_rows([*old, turn(100)]))


def test_nothing_changed_is_no_change() -> None:
    old = conversation(10)
    plan = planned(old, known(3, old), 3)
    assert not plan.changed and plan.rows == [] and not plan.delete


def test_stale_memory_asks_for_the_row_before_the_prefix_only(counted: Counted) -> None:
    """Another handle appended two messages: one indexed range read, no prefix work."""
    mine = conversation(100)
    theirs = conversation(102)
    new = conversation(103)
    memory, stored = known(7, mine), stored_rows(theirs)[99:]
    counted.reset()
    plan = planned(new, memory, 9)
    assert plan.fetch_from == 99
    plan.resolve(stored)
    assert plan.fetch_from is None
    # Their two rows equal the new tail's: kept; only the 103rd is written.
    assert (plan.keep, plan.delete, [p for p, _, _ in plan.rows]) == (102, False, [102])
    assert counted.encoded == 3 and counted.hashed == 3


def test_a_rewritten_prefix_falls_back_to_every_digest(counted: Counted) -> None:
    mine = conversation(50)
    theirs = [*mine[:10], turn(10, "theirs")]
    new = [*mine, turn(50)]
    memory, stored = known(1, mine), stored_rows(theirs)
    counted.reset()
    plan = planned(new, memory, 2)
    assert plan.fetch_from == 49
    plan.resolve(stored[49:])  # nothing there: the anchor is missing
    assert plan.fetch_from == 0
    plan.resolve(stored)
    assert (plan.keep, plan.delete) == (10, True)
    assert [p for p, _, _ in plan.rows] == list(range(10, 51))
    # The shared prefix was compared with remembered digests, not re-encoded.
    assert counted.encoded == 41 and counted.hashed == 41


def read_known(version: int, messages: list[Message]) -> Known:
    """What a read remembers: the messages and the last chain digest alone."""
    last = stored_rows(messages)[-1][1]
    return Known(version, tuple(messages), last, len(messages) - 1)


def test_a_read_knowing_the_last_digest_appends_from_it(counted: Counted) -> None:
    """The handle that read (no one wrote since) asks for nothing; one that another
    handle wrote past asks for the row before the prefix, as a full memory does."""
    old = conversation(100)
    memory = read_known(7, old)
    whole = b"".join(d for _, d in stored_rows([*old, turn(100)]))
    counted.reset()
    plan = planned([*old, turn(100)], memory, 7)
    assert plan.fetch_from is None
    assert (plan.keep, plan.delete, [p for p, _, _ in plan.rows]) == (100, False, [100])
    assert (counted.encoded, counted.hashed) == (1, 1)
    assert plan.rows[0][1] == whole[-DIGEST_SIZE:]
    # What it remembers after: the digests from the last one it read on.
    after = plan.known(8)
    assert (after.first, after.digests) == (99, whole[99 * DIGEST_SIZE:])
    assert after.digest_at(98) is None and after.digest_at(100) == whole[-DIGEST_SIZE:]

    theirs = conversation(102)
    plan = planned(conversation(103), read_known(7, old), 9)
    assert plan.fetch_from == 99
    plan.resolve(stored_rows(theirs)[99:])
    assert (plan.keep, plan.delete, [p for p, _, _ in plan.rows]) == (102, False, [102])
    assert plan.rows[0][1] == stored_rows(conversation(103))[102][1]


def test_a_read_edited_inside_fetches_the_digest_it_chains_from(counted: Counted) -> None:
    """The handle that read saves the transcript edited at 40 (no one wrote since):
    the stored rows are what it read, so it fetches the digest at 39, trusts it, and
    writes from 40 on; an edit of the first message fetches from 0 and keeps nothing."""
    old = conversation(100)
    new = [*old[:40], turn(40, "edited"), *old[41:]]
    memory, stored = read_known(3, old), stored_rows(old)[39:]
    counted.reset()
    plan = planned(new, memory, 3)
    assert plan.fetch_from == 39
    plan.resolve(stored)
    assert (plan.keep, plan.delete) == (40, True)
    assert [p for p, _, _ in plan.rows] == list(range(40, 100))
    assert counted.encoded == 60 and counted.hashed == 60
    assert [d for p, d, _ in plan.rows] == [d for _, d in stored_rows(new)[40:]]
    assert plan.known(4).digests == b"".join(d for _, d in stored_rows(new)[39:])

    first_edited = [turn(0, "edited"), *old[1:]]
    plan = planned(first_edited, read_known(3, old), 3)
    assert plan.fetch_from == 0
    plan.resolve(stored_rows(old))
    assert (plan.keep, plan.delete) == (0, True)
    assert [d for _, d, _ in plan.rows] == [d for _, d in stored_rows(first_edited)]


def test_a_read_another_handle_rewrote_falls_back_to_every_row(counted: Counted) -> None:
    """Another handle rewrote the prefix of what was read: the digest the read knows
    does not match and the digests before it are unknown, so the whole transcript is
    encoded and compared with every stored row (the rows still equal are kept)."""
    old = conversation(30)
    theirs = [*old[:10], turn(10, "theirs")]
    memory, stored = read_known(1, old), stored_rows(theirs)
    counted.reset()
    plan = planned([*old, turn(30)], memory, 2)
    assert plan.fetch_from == 29
    plan.resolve(stored[29:])
    assert plan.fetch_from == 0
    plan.resolve(stored)
    assert (plan.keep, plan.delete) == (10, True)
    assert counted.encoded == 31
    assert [(p, d) for p, d, _ in plan.rows] == stored_rows([*old, turn(30)])[10:]


def test_a_gap_in_positions_ends_the_prefix() -> None:
    rows = stored_rows(conversation(6))
    del rows[3]
    plan = planned(conversation(6), None, 1)
    plan.resolve(rows)
    assert (plan.keep, plan.delete) == (3, True)
    assert [p for p, _, _ in plan.rows] == [3, 4, 5]


def test_nothing_remembered_encodes_everything_once(counted: Counted) -> None:
    stored = stored_rows(conversation(19))
    counted.reset()
    plan = planned(conversation(20), None, 4)
    assert plan.fetch_from == 0
    plan.resolve(stored)
    assert (plan.keep, [p for p, _, _ in plan.rows]) == (19, [19])
    assert counted.encoded == 20


def test_a_complete_plan_refuses_more_rows_and_an_incomplete_one_a_version() -> None:
    plan = planned([], None, None)
    with pytest.raises(RuntimeError, match="complete"):
        plan.resolve([])
    pending = planned(conversation(2), None, 1)
    with pytest.raises(RuntimeError, match="not complete"):
        pending.known(2)


# -- the memory --------------------------------------------------------------------------


def test_memory_never_steps_back_to_an_older_version() -> None:
    memory = Remembered(4)
    memory.learn(b"s", known(5, conversation(3)))
    memory.learn(b"s", known(4, conversation(2)))
    entry = memory.get(b"s")
    assert entry is not None and entry.version == 5
    memory.learn(b"s", known(5, conversation(3, "same version")))
    entry = memory.get(b"s")
    assert entry is not None and entry.messages == tuple(conversation(3, "same version"))
    # Where appends leave the version alone, the same version with fewer messages is
    # older too (a slow read finishing after an append).
    memory.learn(b"s", known(5, conversation(2)))
    entry = memory.get(b"s")
    assert entry is not None and entry.length == 3
    memory.learn(b"s", known(5, conversation(4)))
    entry = memory.get(b"s")
    assert entry is not None and entry.length == 4


def test_a_read_of_a_remembered_version_teaches_nothing() -> None:
    """``wants_read``: only a version newer than the remembered one (or the same with
    more messages, or none) is learned from a read; the entry kept is the one the
    handle had."""
    memory = Remembered(4)
    assert memory.wants_read(b"s", 1, 0)
    memory.learn(b"s", known(5, conversation(3)))
    assert not memory.wants_read(b"s", 5, 3) and not memory.wants_read(b"s", 4, 9)
    assert not memory.wants_read(b"s", 5, 2)
    assert memory.wants_read(b"s", 6, 3) and memory.wants_read(b"s", 5, 4)
    assert not Remembered(0).wants_read(b"s", 1, 1)


def test_memory_is_bounded_least_recently_used_first() -> None:
    memory = Remembered(2)
    for key in (b"a", b"b"):
        memory.learn(key, known(1, []))
    memory.get(b"a")
    memory.learn(b"c", known(1, []))
    assert (memory.get(b"a"), memory.get(b"b")) != (None, None)
    assert memory.get(b"b") is None and len(memory) == 2
    off = Remembered(0)
    off.learn(b"a", known(1, []))
    assert off.get(b"a") is None


def test_only_messages_past_the_remembered_prefix_are_type_checked() -> None:
    """A bad item is refused before any database work, wherever it is, with its index."""
    memory = Remembered()
    memory.learn(b"s", known(1, conversation(5)))
    for bad in ([*conversation(5), "x"], [*conversation(2), "x", *conversation(5)[3:]], "text"):
        with pytest.raises(TypeError, match=r"messages\[(5|2)\]|not str"):
            memory.prepare(b"s", bad)
    assert memory.prepare(b"s", (*conversation(5), turn(5))).new[-1] == turn(5)


def test_an_edit_inside_the_remembered_prefix_is_found_when_the_list_also_grows() -> None:
    """An agent that edits its own list in place and appends to it: the save compares
    with the snapshot it kept, not with the caller's list, and keeps a fresh snapshot."""
    memory = Remembered()
    transcript = conversation(10)
    plan = memory.prepare(b"s", transcript)
    plan.start(None)
    memory.learn(b"s", plan.known(1))
    transcript[3] = turn(3, "edited")
    transcript.append(turn(10))
    plan = memory.prepare(b"s", transcript)
    plan.start(1)
    assert (plan.keep, plan.delete, [p for p, _, _ in plan.rows]) == (3, True, list(range(3, 11)))
    transcript.append(turn(11))
    assert list(plan.known(2).messages) == transcript[:11]


def test_equal_but_other_objects_are_remembered_as_the_callers() -> None:
    """A replica that read the session (its own decoded objects) and then saves the
    application's list of equal objects: it keeps the application's objects, so the
    next save compares identities, not every message's fields."""
    memory = Remembered()
    memory.learn(b"s", Known(1, conversation(50), b"".join(d for _, d in stored_rows(conversation(50)))))
    theirs = [*conversation(50), turn(50)]
    plan = memory.prepare(b"s", theirs)
    plan.start(1)
    assert plan.keep == 50
    assert all(a is b for a, b in zip(plan.known(2).messages, theirs, strict=True))


def test_remembered_buffers_grow_in_place_and_never_change_below_a_length() -> None:
    """The common save extends the remembered list and digests in place (no copy of
    the prefix); what an older entry covers stays as it was, whether the later save
    was learned, never learned (it failed), or differed in the middle."""
    base = conversation(10)
    memory = remembering(base)
    entry = cast_entry(memory)
    buffer = entry._messages

    grown = [*base, turn(10)]
    plan = memory.prepare(b"s", grown)
    assert plan.new is buffer and plan.length == 11  # extended, not copied
    assert entry.messages == base and entry.length == 10
    del buffer[10:]  # as if that save failed before it was learned
    appending = memory.plan_append(b"s", grown)
    assert appending is not None
    before, after, rows = appending
    assert before is entry
    assert after._messages is buffer and after.length == 11 and after._digests is entry._digests
    assert rows == [(10, stored_rows(grown)[10][1], row_text(turn(10)))]
    assert after.digests == b"".join(d for _, d in stored_rows(grown))
    # Never learned (the statement was refused): a save from the older entry copies.
    assert memory.plan_append(b"s", [*base, turn(10, "b")]) is None
    other = [*base, turn(10, "b"), turn(11, "b")]
    second = memory.prepare(b"s", other)
    assert second.new is not buffer and list(second.new) == other
    assert entry.messages == base and after.messages == grown
    second.start(1)
    assert [p for p, _, _ in second.rows] == [10, 11]
    assert second.digest_at(11) == stored_rows(other)[11][1]

    # A list that differs in the middle leaves the buffer as it was.
    fresh = Remembered()
    fresh.learn(b"s", Known(1, list(base), b"".join(d for _, d in stored_rows(base))))
    kept = cast_entry(fresh)
    edited = [*base[:4], turn(4, "edited"), *base[5:], turn(10)]
    edit = fresh.prepare(b"s", edited)
    assert len(kept._messages) == 10 and kept.messages == base
    edit.start(1)
    assert [p for p, _, _ in edit.rows] == list(range(4, 11))
    assert edit.digest_at(10) == stored_rows(edited)[10][1]


def test_plan_append_takes_only_the_remembered_messages_and_new_ones_after_them() -> None:
    """The one-step plan of the common save: anything but the very remembered messages
    followed by new ones (an edit where no probe looks, equal copies, a tuple, a bad
    item, nothing new, a handle that saw another writing) is left to ``prepare``, and
    leaves the remembered buffer as it was."""
    memory = Remembered()
    base = conversation(10)
    digests = b"".join(d for _, d in stored_rows(base))
    memory.learn(b"s", Known(1, list(base), bytearray(digests)))
    edited = list(base)
    edited[3] = turn(3, "edited")  # not at 0, n // 2 or n - 1, where the probes look
    copies = [Message.text(m.role, cast_text(m)) for m in base]
    for refused in ([*edited, turn(10)], [*copies, turn(10)], (*base, turn(10)), [*base, "not a message"],
                    list(base), base[:9]):
        assert memory.plan_append(b"s", refused) is None, refused
        assert len(cast_entry(memory)._messages) == 10
    appending = memory.plan_append(b"s", [*base, turn(10), turn(11)])
    assert appending is not None and [row[0] for row in appending[2]] == [10, 11]
    shared = Remembered()
    shared.learn(b"s", Known(1, list(base), bytearray(digests), shared=True))
    assert shared.plan_append(b"s", [*base, turn(10)]) is None


@pytest.mark.parametrize("more", [1, 2], ids=["one message (an agent's turn)", "two messages"])
def test_plan_append_plans_the_rows_and_memory_a_full_save_would(more: int) -> None:
    """The one-step plan, on its path for one message and on the general one: the rows
    (position, chain digest, row text) and the memory learned once they are written are
    what they are for a save of the whole transcript; planned again before that is
    learned, the buffer it extended is refused rather than extended twice."""
    base = conversation(10)
    memory = remembering(base)
    transcript = [*base, *(turn(10 + i) for i in range(more))]
    appending = memory.plan_append(b"s", transcript)
    assert appending is not None
    before, after, rows = appending
    assert before is cast_entry(memory)
    want = stored_rows(transcript)
    assert rows == [(p, want[p][1], row_text(transcript[p])) for p in range(10, 10 + more)]
    assert after.version == 1 and after.length == 10 + more and after.messages == transcript
    assert after.digests == b"".join(d for _, d in want)
    for later in ([*base, turn(30)], [*transcript, turn(20)]):  # it still remembers 10
        assert memory.plan_append(b"s", later) is None
    assert len(cast_entry(memory)._messages) == 10 + more
    assert after.pending
    assert memory.swap(b"s", before, after)  # the store's step before its statement
    after.pending = False  # and after it, once the statement wrote the rows
    again = memory.plan_append(b"s", [*transcript, turn(20)])
    assert again is not None and again[2][0][1] == stored_rows([*transcript, turn(20)])[-1][1]


def test_an_entry_whose_rows_may_not_be_written_is_never_trusted_by_its_version() -> None:
    """The store remembers a planned append before its statement (pending) and marks it
    written only once the statement wrote it. Meanwhile another thread of the handle
    plans no append from it (one an interrupt left behind may have no rows stored, and
    an append after it would follow a gap), and a save planned from
    it checks the stored digests even when the stored version and count match it: the
    statement may have failed and another handle appended a different message, which a
    version and a count cannot tell apart. ``swap`` installs an entry only in place of
    the one it was planned from."""
    base = conversation(10)
    memory = remembering(base)
    entry = cast_entry(memory)
    transcript = [*base, turn(10)]
    known, grown, _ = cast_appending(memory.plan_append(b"s", transcript))
    assert known is entry and grown.pending
    assert memory.swap(b"s", known, grown) and cast_entry(memory) is grown
    assert not memory.swap(b"s", known, grown)  # planned from an entry no longer remembered
    transcript.append(turn(11))
    assert memory.plan_append(b"s", transcript) is None
    plan = memory.prepare(b"s", transcript)
    plan.start(1, 11)  # version 1 and 11 rows, as the entry says: but whose row 10?
    assert plan.fetch_from == 10
    theirs = [*base, turn(10, "theirs")]
    plan.resolve([stored_rows(theirs)[10]])
    assert plan.fetch_from == 0
    plan.resolve(stored_rows(theirs))
    assert plan.keep == 10 and plan.delete and [p for p, _, _ in plan.rows] == [10, 11]
    assert plan.digest_at(11) == stored_rows(transcript)[11][1]
    # Written: trusted (and appends are planned from it again: the test above).
    grown.pending = False
    written = memory.prepare(b"s", transcript)
    written.start(1, 11)
    assert written.fetch_from is None and [p for p, _, _ in written.rows] == [11]


def cast_appending(appending: tuple[Known, Known, list[tuple[int, bytes, str]]] | None
                   ) -> tuple[Known, Known, list[tuple[int, bytes, str]]]:
    assert appending is not None
    return appending


def test_plan_append_keeps_the_message_it_checked() -> None:
    """The caller's list changing while the one-message plan checks its new item
    (another thread, here the item itself): what was checked is what the buffer gets,
    and the comparison then refuses the changed list, leaving the buffer as it was; a
    second read of the slot put an unchecked item in the remembered buffer, past what
    any entry covers, and failed in row_text with an AttributeError."""
    base = conversation(10)
    memory = remembering(base)
    transcript: list[Any] = [*base, None]

    class Swapping:
        """Says it is a Message when asked, and swaps itself out of the list then."""

        @property  # type: ignore[misc]
        def __class__(self) -> type:
            transcript[10] = 42
            return Message

    transcript[10] = Swapping()
    assert memory.plan_append(b"s", transcript) is None
    assert len(cast_entry(memory)._messages) == 10
    with pytest.raises(TypeError, match=r"messages\[10\]"):
        memory.prepare(b"s", transcript)


def cast_text(message: Message) -> str:
    part = message.content[0]
    assert isinstance(part, Text)
    return part.text


def test_a_save_refused_for_a_bad_item_leaves_the_buffer_as_it_was() -> None:
    """The common save extends the remembered list before it type-checks the new
    messages; refused, it takes them off again, so the next save extends the buffer
    rather than copying it (and the refused item is not kept alive by the memory)."""
    memory = Remembered()
    base = conversation(10)
    memory.learn(b"s", Known(1, list(base), b"".join(d for _, d in stored_rows(base))))
    entry = cast_entry(memory)
    with pytest.raises(TypeError, match=r"messages\[10\]"):
        memory.prepare(b"s", [*base, "not a message"])
    assert len(entry._messages) == 10
    plan = memory.prepare(b"s", [*base, turn(10)])
    assert plan.new is entry._messages and plan.length == 11


def cast_entry(memory: Remembered) -> Known:
    entry = memory.get(b"s")
    assert entry is not None
    return entry


def test_a_list_changed_during_the_comparison_is_saved_as_copied(tmp_path: Path) -> None:
    """Another thread replaces a message of the caller's list while a replica compares
    it with its memory: what the save writes and remembers is its own copy, whole. A
    Text whose __eq__ makes the change stands in for the thread, deterministically."""
    transcript: list[Message] = []
    intruder = Message.text("user", "X")
    armed = [False]

    class Meddling(Text):
        def __eq__(self, other: object) -> bool:
            if armed[0] and transcript and transcript[0] is not intruder:
                armed[0] = False
                transcript[0] = intruder
            return isinstance(other, Text) and self.text == other.text

        __hash__ = Text.__hash__

    path = tmp_path / "meddled.sqlite"
    with SQLiteStore(path) as writer, SQLiteStore(path) as replica:
        writer.save("s", [Message("user", (Meddling("a"),)), turn(1)])
        replica.messages("s")  # remembers its own objects
        transcript[:] = [Message("user", (Meddling("a"),)), turn(1), turn(2)]  # equal, not the same
        armed[0] = True
        replica.save("s", transcript)
        replica.save("s", transcript)  # no race now: must store the list as it is
        with SQLiteStore(path, cache_sessions=0) as fresh:
            assert fresh.messages("s") == [intruder, turn(1), turn(2)]


@pytest.mark.parametrize("other", ["refused", "stalled"])
def test_a_prefix_never_runs_past_what_is_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    """A save of a sequence that is neither a list nor a tuple compares it with the
    remembered messages; another thread's save of a list extends the remembered buffer
    in place meanwhile: a save refused for a bad item (which left it extended), or one
    that has prepared and not yet reached the store's lock. The comparison must stop
    at what the handle remembers: a prefix past it took a message the store never held
    for stored, and the save wrote the rows after it only, leaving a gap. A pause in
    common_prefix stands in for the thread switch."""
    path = tmp_path / "race.sqlite"
    base = conversation(10)
    original = _incremental.common_prefix
    paused, extended = threading.Event(), threading.Event()

    def switch(old: Any, new: Any) -> int:
        if threading.current_thread().name == "replica":
            paused.set()
            extended.wait(5)
        return original(old, new)

    with SQLiteStore(path) as store:
        store.save("s", base[:9])
        store.save("s", base)  # remembered as a list: the buffer later saves extend
        monkeypatch.setattr(_incremental, "common_prefix", switch)
        errors: list[BaseException] = []

        def replica() -> None:
            try:
                store.save("s", UserList([*base, turn(10), turn(11)]))
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=replica, name="replica")
        thread.start()
        assert paused.wait(5)
        if other == "refused":
            with pytest.raises(TypeError):
                store.save("s", [*base, turn(10), "not a message"])  # type: ignore[list-item]
        else:
            store._remembered.prepare(b"s", [*base, turn(10)])  # the rest of its save never runs
        extended.set()
        thread.join(5)
        monkeypatch.undo()
        assert not errors
        with SQLiteStore(path, cache_sessions=0) as fresh:
            assert fresh.messages("s") == [*base, turn(10), turn(11)]
        assert run_positions(path) == list(range(12))


def run_positions(path: Path) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [p for (p,) in conn.execute("SELECT position FROM storetest_messages ORDER BY position")]


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_a_bad_cache_size_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="cache_sessions"):
        Remembered(bad)  # type: ignore[arg-type]


# -- on a real SQLite file ------------------------------------------------------------


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[SQLiteStore, SQLiteStore]]:
    path = tmp_path / "two.sqlite"
    with SQLiteStore(path) as a, SQLiteStore(path) as b:
        yield a, b


def test_two_alternating_handles_encode_only_what_changed(tmp_path: Path, counted: Counted) -> None:
    """Each handle learns the other's save without re-encoding or re-hashing the prefix,
    and reads the stored digests only from the end of what it knew."""
    path = tmp_path / "two.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    conv = conversation(300)
    with SQLiteStore(conn) as a, SQLiteStore(path) as b:
        a.save("s", conv[:200])
        b.messages("s")  # b joins as a replica does: it reads first
        for n in range(201, 300):
            counted.reset()
            statements.clear()
            (a if n % 2 else b).save("s", conv[:n])
            # The other handle wrote message n-2; this one writes n-1: two encodes at most.
            assert counted.encoded <= 2, (n, counted.encoded)
            assert counted.hashed <= 2, (n, counted.hashed)
            if n > 201 and n % 2:
                reads = [s for s in statements if "digest FROM" in s]
                anchor = f"position >= {n - 3} ORDER BY position"
                assert reads and all(s.endswith(anchor) for s in reads), reads
        assert a.messages("s") == conv[:299] == b.messages("s")
    conn.close()


def test_a_second_handle_learns_an_edit_and_a_shrink(two: tuple[SQLiteStore, SQLiteStore]) -> None:
    a, b = two
    conv = conversation(60)
    a.save("s", conv)
    b.messages("s")
    edited = [*conv[:30], turn(30, "edited"), *conv[31:]]
    a.save("s", edited)
    b.save("s", [*edited, turn(60)])
    assert a.messages("s") == [*edited, turn(60)]
    a.save("s", conv[:5])
    b.save("s", [*conv[:5], turn(5, "b")])
    assert a.messages("s") == [*conv[:5], turn(5, "b")]


# -- the same core on the server stores --------------------------------------------------


def _alternate(save_a: Any, save_b: Any, read: Any, counted: Counted) -> None:
    """Two handles take turns growing one conversation; each save may encode and hash
    only the message the other wrote and its own."""
    conv = conversation(160)
    save_a(conv[:100])
    read()  # both handles know the session, as replicas that read it first do
    for n in range(101, 160):
        counted.reset()
        (save_a if n % 2 else save_b)(conv[:n])
        assert (counted.encoded, counted.hashed) <= (2, 2), (n, counted.encoded, counted.hashed)
    assert read() == conv[:159]


def test_two_alternating_postgres_handles_encode_only_what_changed(
    storetest_postgres_url: str, counted: Counted
) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    from reference_stores.postgres import SCHEMA, PostgresStore

    session = f"alternate-{secrets.token_hex(4)}"

    async def main() -> None:
        pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        try:
            await pool.execute(SCHEMA)
            a, b = PostgresStore(pool), PostgresStore(pool)
            conv = conversation(160)
            await a.save(session, conv[:100])
            await b.messages(session)
            for n in range(101, 160):
                counted.reset()
                await (a if n % 2 else b).save(session, conv[:n])
                assert (counted.encoded, counted.hashed) <= (2, 2), (n, counted.encoded, counted.hashed)
            assert await a.messages(session) == conv[:159] == await PostgresStore(pool).messages(session)
        finally:
            await pool.close()

    asyncio.run(main())


def test_two_alternating_mysql_handles_encode_only_what_changed(
    storetest_mysql_url: str, counted: Counted
) -> None:
    pytest.importorskip("pymysql")
    from urllib.parse import urlsplit, urlunsplit

    from reference_stores.mysql import SCHEMA, MySQLStore
    from storetest.databases import mysql_connection as connect

    name = f"storetest_inc_{secrets.token_hex(4)}"
    parts = urlsplit(storetest_mysql_url)
    server = urlunsplit((parts.scheme, parts.netloc, "/", "", ""))
    url = urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
    with closing(connect(server, autocommit=True)) as admin, admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        with closing(connect(url)) as one, closing(connect(url)) as two:
            with one.cursor() as cur:
                for statement in SCHEMA:
                    cur.execute(statement)
            one.commit()
            a, b = MySQLStore(one), MySQLStore(two)
            _alternate(
                lambda m: a.save("s", m), lambda m: b.save("s", m), lambda: b.messages("s"), counted
            )
            assert MySQLStore(lambda: connect(url)).messages("s") == conversation(159)
    finally:
        with closing(connect(server, autocommit=True)) as admin, admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
