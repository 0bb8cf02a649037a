"""The diagnosis names the corruption a store author must fix."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest

from storetest import Attachment, Message
from storetest._engine.diagnosis import describe_id_merge, describe_steers, describe_text, describe_transcript


@pytest.mark.parametrize(
    ("sent", "got", "words"),
    [
        ('{"z":1,"a":[1, 2],"z":3}', '{"a": [1, 2], "z": 3}', "duplicate key dropped, keys reordered"),
        ('{"b":1,"a":2}', '{"a":2,"b":1}', "keys reordered"),
        ('{"a":1.0}', '{"a":1}', "number rewritten (1.0 became 1)"),
        ('{ "a" : 1 }', '{"a": 1}', "whitespace changed"),
        ("a\x00b", "ab", "NUL lost"),
        ("hi  ", "hi", "trailing whitespace stripped"),
        ("a\r\nb", "a\nb", "CRLF turned into LF"),
        ("e\u0301", "é", "Unicode normalized to NFC"),
        ("x" * 100, "x" * 64, "truncated at 64 bytes of 100"),
    ],
)
def test_text_damage_is_named(sent: str, got: str, words: str) -> None:
    assert words in describe_text(sent, got)


def test_transcript_damage_is_named() -> None:
    a, b = Message.text("user", "a"), Message.text("assistant", "b")
    assert "appended instead of replaced" in describe_transcript([b], [a, b], previous=[a])
    assert "empty list left the old transcript" in describe_transcript([], [a], previous=[a])
    assert "messages reordered" in describe_transcript([a, b], [b, a])
    image = Message("user", (Attachment("image/png", b"\xff\x00"),))
    decoded = Message("user", (Attachment("image/png", "\ufffd\x00".encode()),))
    assert "decoded as text" in describe_transcript([image], [decoded])


def test_steer_damage_is_named() -> None:
    assert "last-in-first-out" in describe_steers(["a", "b", "c"], ["c", "b", "a"])
    assert "identical steers merged" in describe_steers(["a", "a"], ["a"])
    assert "duplicated" in describe_steers(["a"], ["a", "a"])
    assert "out of order" in describe_steers(["a", "b", "c"], ["b", "a", "c"])


def test_merged_ids_are_explained() -> None:
    assert "case" in describe_id_merge("s-a", "s-A")
    assert "trailing spaces" in describe_id_merge("s-a", "s-a ")
    assert "normalization" in describe_id_merge("s-é", "s-e\u0301")
    assert "prefix" in describe_id_merge("x" * 64 + "1", "x" * 64)


def test_like_is_named_only_where_it_explains_the_merge() -> None:
    """A hash merged 'iso-a' with 'iso-_' (memory-id-hash-prefix read 'LIKE' on a
    fresh-clone run): a write by the pattern 'iso-_' would have reached 'iso-A' too,
    which read back its own."""
    like = "LIKE instead of ="
    assert like in describe_id_merge("iso-_", "iso-a", read_back_own=["iso-A"])  # read by pattern
    assert like in describe_id_merge("iso-a", "iso-_", read_back_own=[])  # written by pattern, reaching all before
    assert like in describe_id_merge("iso-a", "iso-_", read_back_own=["iso-ab"])  # '_' reaches one character
    assert like not in describe_id_merge("iso-a", "iso-_", read_back_own=["iso-A"])
    assert "hashed" in describe_id_merge("iso-a", "iso-_", read_back_own=["iso-A"])
    assert like not in describe_id_merge("iso-ab", "iso-_")  # neither, as a pattern, matches the other
    assert like in describe_id_merge("iso-a", "iso-_")  # no direction known: either may be the pattern


def _sharing(*groups: tuple[str, ...]) -> Any:
    """A ``shared`` oracle: ids in one group share data; any others are apart (each reads
    back its own)."""
    where: dict[str, object] = {i: n for n, group in enumerate(groups) for i in group}
    return lambda x, y: where.get(x, x) == where.get(y, y)


def test_a_cause_is_named_only_if_the_other_ids_bear_it_out() -> None:
    """With what the clause saw of every id: a cut at the NUL would merge 'a\\x00c' with
    'a' too, lowercasing would merge 'e' with 'E', a prefix key scheme 'k' with
    'k:messages'. Where they are apart, the pair alike by chance is not given that cause;
    where ids alike in nothing share data, the store merges by something else (the
    hash-prefix store read "cut at a NUL" on 1 seed in 7: memory-id-hash-prefix)."""
    ids = ("a", "a\x00b", "a\x00c", "A", "e", "E", "k", "k:messages", "q", "zz")
    nul = "cut at a NUL"
    assert nul in describe_id_merge("a", "a\x00b", shared=_sharing(("a", "a\x00b", "a\x00c")), ids=ids)
    assert nul not in describe_id_merge("a", "a\x00b", shared=_sharing(("a", "a\x00b"), ("a\x00c",)), ids=ids)
    case = _sharing(("a", "A"), ("e", "E"))
    assert "case" in describe_id_merge("a", "A", shared=case, ids=ids)
    assert "case" not in describe_id_merge("a", "A", shared=_sharing(("a", "A"), ("e",), ("E",)), ids=ids)
    keys = _sharing(("a", "a:messages"), ("k", "k:messages"))
    assert "prefix:<id>" in describe_id_merge("a", "a:messages", shared=keys, ids=(*ids, "a:messages"))
    apart = _sharing(("a", "a:messages"), ("k",), ("k:messages",))
    assert "prefix:<id>" not in describe_id_merge("a", "a:messages", shared=apart, ids=(*ids, "a:messages"))
    hashed = _sharing(("a", "A", "q"), ("zz", "k"))
    line = describe_id_merge("a", "A", shared=hashed, ids=ids)
    assert line.startswith("two distinct ids share data (ids hashed or truncated?)"), line
    assert "'k' and 'zz' share data too" in line or "'a' and 'q' share data too" in line, line


def test_entry_logs_name_the_corruption() -> None:
    """Each broken log store's damage gets its own words."""
    from datetime import datetime, timedelta, timezone

    from storetest._engine.diagnosis import describe_log, describe_time
    from storetest.contract import Message
    from storetest.entries import Entry

    t = datetime(2026, 3, 29, 1, 30, 0, 123456, timezone(timedelta(hours=2)))
    assert "truncated to seconds" in describe_time(t, t.replace(microsecond=0))
    assert "truncated to milliseconds" in describe_time(t, t.replace(microsecond=123000))
    assert "UTC offset lost" in describe_time(t, t.astimezone(UTC))
    assert "naive local time" in describe_time(t, t.replace(tzinfo=None).replace(tzinfo=UTC)
                                               - timedelta(hours=5))
    assert "wall time was kept" in describe_time(t, t.replace(tzinfo=UTC))
    utc = t.astimezone(UTC)
    assert "naive local time" in describe_time(utc, utc - timedelta(hours=5))
    a = Entry.message("a", None, t, Message.text("user", "x"))
    b = Entry.message("b", "a", t - timedelta(minutes=1), Message.text("user", "y"))
    assert "sorted by creation time" in describe_log([a, b], [b, a])
    assert "1 entries lost" in describe_log([a, b], [a])
    assert "stored twice" in describe_log([a], [a, a])
    assert "kind 'meta' came back as 'message'" in describe_log(
        [Entry.meta("a", None, t, Message.text("user", "x"))], [a])


def test_merged_ids_name_every_difference() -> None:
    both = describe_id_merge("s-A", "s-a  ")
    assert "trailing spaces and case" in both and "hashed" not in both
    accent_and_case = describe_id_merge("s-e", "s-É")
    assert "accents and case" in accent_and_case
    assert "only by accents were" not in accent_and_case


def test_an_id_merged_with_itself_plus_a_key_suffix_names_the_key_layout() -> None:
    from storetest._engine.diagnosis import describe_id_merge

    said = describe_id_merge("x", "x:messages")
    assert "keys built as prefix:<id> and prefix:<id>:<kind> collide" in said, said
    assert "prefix" in describe_id_merge("x", "xy")  # a plain prefix stays a prefix


def test_redis_refusals_are_named_in_words() -> None:
    from storetest._engine.diagnosis import describe_backend_refusal
    from storetest._engine.failures import describe_exception

    class ClusterCrossSlotError(Exception):
        pass

    said = describe_exception(ClusterCrossSlotError("Keys in request don't hash to the same slot"))
    assert said.startswith("keys of one session in different hash slots"), said
    assert "two sessions' keys collide" in (describe_backend_refusal("WRONGTYPE Operation against a key") or "")
    assert describe_backend_refusal("ERR syntax error") is None
