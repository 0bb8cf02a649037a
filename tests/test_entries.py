"""The entry-log contract: entries refuse bad values naming the field, keep times
exactly, and batches are checked (duplicate ids, unknown parents) before anything is
written."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from storetest.contract import Message
from storetest.entries import (
    Compaction,
    Custom,
    Entry,
    LogStore,
    check_batch,
    check_create,
    check_entries,
)

T0 = datetime(2026, 5, 1, 12, 0, 0, 123456, timezone(timedelta(hours=2)))
HI = Message.text("user", "hi")


def _e(entry_id: str, parent: str | None = None) -> Entry:
    return Entry.message(entry_id, parent, T0, HI)


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: _e(""), ValueError, "Entry.id must not be empty"),
        (lambda: _e(1), TypeError, "Entry.id must be str"),
        (lambda: _e("\ud800"), ValueError, "lone surrogate"),
        (lambda: _e("a", ""), ValueError, "Entry.parent_id must not be empty"),
        (lambda: _e("a", "a"), ValueError, "cannot be its own parent"),
        (lambda: Entry.message("a", None, datetime(2026, 1, 1), HI), ValueError, "timezone-aware"),
        (lambda: Entry.message("a", None, "2026-01-01T00:00:00Z", HI), TypeError,
         "created_at must be datetime"),
        (lambda: Entry.message("a", None, T0.replace(tzinfo=timezone(timedelta(seconds=30))), HI),
         ValueError, "whole minutes"),
        (lambda: Entry("a", None, T0, "ephemeral", HI), ValueError, "Entry.kind must be one of"),
        (lambda: Entry("a", None, T0, "custom", HI), TypeError, "payload of a 'custom' entry must be Custom"),
        (lambda: Entry("a", None, T0, "meta", Custom("k", "{}")), TypeError, "must be Message"),
        (lambda: Custom("", "{}"), ValueError, "Custom.kind must not be empty"),
        (lambda: Custom("k", "{'a': 1}"), ValueError, "Custom.data must be JSON text"),
        (lambda: Custom("k", "NaN"), ValueError, "Custom.data must be JSON text"),
        (lambda: Custom("k", b"{}"), TypeError, "Custom.data must be str"),
        (lambda: Compaction("s", ""), ValueError, "Compaction.first_kept_id must not be empty"),
        (lambda: Compaction(None, "a"), TypeError, "Compaction.summary must be str"),
    ],
)
def test_bad_values_are_refused_naming_the_field(make: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        make()


def test_ephemeral_is_not_an_entry_kind() -> None:
    """Ephemeral content never reaches a store, so there is no entry for it."""
    with pytest.raises(ValueError, match="ephemeral"):
        Entry("a", None, T0, "ephemeral", HI)  # type: ignore[arg-type]


def test_custom_data_is_kept_as_given() -> None:
    """Valid JSON in any spelling is accepted and kept byte for byte."""
    for text in ['{"z":1,"a":[1, 2],"z":3}', ' 1e400 ', '"\\u0000"', '{"a" :\n\t1}']:
        assert Custom("k", text).data == text


def test_times_keep_the_instant_and_the_offset() -> None:
    """Equality includes the UTC offset, which plain datetime equality ignores; a named
    zone becomes its offset at that moment, which is all a stored timestamp carries."""
    same_instant = T0.astimezone(UTC)
    assert same_instant == T0  # datetime's own equality
    assert Entry.message("a", None, same_instant, HI) != Entry.message("a", None, T0, HI)
    assert Entry.message("a", None, T0, HI) == Entry.message("a", None, T0, HI)
    assert hash(Entry.message("a", None, T0, HI)) == hash(Entry.message("a", None, T0, HI))
    assert Entry.message("a", None, T0.replace(microsecond=0), HI) != Entry.message("a", None, T0, HI)
    berlin = datetime(2026, 5, 1, 12, 0, 0, 123456, ZoneInfo("Europe/Berlin"))
    kept = Entry.message("a", None, berlin, HI).created_at
    assert kept.utcoffset() == timedelta(hours=2) and kept == berlin
    assert Entry.message("a", None, berlin, HI) == Entry.message("a", None, T0, HI)


def test_entries_are_frozen() -> None:
    entry = _e("a")
    with pytest.raises(AttributeError):
        entry.id = "b"  # type: ignore[misc]


def test_the_constructors_set_the_kind() -> None:
    assert Entry.meta("a", None, T0, HI).kind == "meta"
    assert Entry.custom("a", None, T0, "artifact", "{}").payload == Custom("artifact", "{}")
    assert Entry.compaction("c", "a", T0, "sum", "a").payload == Compaction("sum", "a")


def test_check_entries_names_the_bad_item() -> None:
    with pytest.raises(TypeError, match=re.escape("entries[1] must be Entry, not Message")):
        check_entries([_e("a"), HI])
    with pytest.raises(TypeError, match="entries must be a sequence of Entry"):
        check_entries(_e("a"))


@pytest.mark.parametrize(
    ("batch", "existing", "words"),
    [
        ([_e("a"), _e("a")], set(), "entries[1] has id 'a', which is twice in the batch"),
        ([_e("b", "x"), _e("a", "x")], {"x", "a"}, "entries[1] has id 'a', which the session already has"),
        ([_e("b", "c"), _e("c")], set(), "entries[0] (id 'b') has parent 'c', which is neither"),
        ([_e("b", "A")], {"a"}, "has parent 'A', which is neither"),
    ],
)
def test_bad_batches_are_refused_naming_the_entry(batch: list[Entry], existing: set[str], words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)) as info:
        check_batch("s1", batch, existing)
    assert "session 's1'" in str(info.value)


def test_good_batches_pass() -> None:
    assert check_batch("s", [_e("b", "a"), _e("c", "b"), _e("d", "a"), _e("r")], {"a"}) == (
        _e("b", "a"), _e("c", "b"), _e("d", "a"), _e("r"),
    )
    assert check_batch("s", [], {"a"}) == ()


def test_create_needs_a_batch_that_stands_alone() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        check_create("s", [])
    with pytest.raises(ValueError, match="neither in the session nor earlier"):
        check_create("s", [_e("b", "a")])


def test_the_memory_log_store_is_a_log_store() -> None:
    from reference_stores.memory_log import MemoryLogStore

    assert isinstance(MemoryLogStore(), LogStore)
