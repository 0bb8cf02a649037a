"""The explanation engine (storetest/_engine/explain.py): every transform of the
catalogue names itself on a value only it changes that way; cuts are named by count
and width; two transforms in a row are named in order; anything else is a minimal diff."""

from __future__ import annotations

from typing import Any

import pytest

from storetest import Attachment, Message, check, item_sessions
from storetest._engine.diagnosis import describe_steers, describe_text, describe_transcript, describe_unseen_steers
from storetest._engine.explain import TRANSFORMS, explain_text, minimal_diff, truncation
from storetest._engine.item_diagnosis import describe_item, describe_items, describe_limit
from tests.broken_stores import registry

#: For each transform's line, a value it changes in a way no earlier transform does.
SAMPLES: dict[str, str] = {
    "NUL lost": "a\x00b\x00c",
    "truncated at the first NUL": "ab\x00cd",
    "trailing whitespace stripped": "abc \t",
    "leading whitespace stripped": "  abc",
    "surrounding whitespace stripped": " abc ",
    "runs of whitespace collapsed": "a  b\t\tc",
    "CRLF turned into LF": "a\r\nb",
    "lone CR turned into LF": "a\rb",
    "LF turned into CRLF": "a\nb",
    "Unicode normalized to NFC": "e\u0301",
    "Unicode normalized to NFD": "\u00e9",
    "Unicode normalized to NFKC": "\ufb01 e\u0301",
    "Unicode normalized to NFKD": "\ufb01 \u00e9",
    "case changed: lowered": "Hello",
    "case changed: uppered": "Hello",
    "case changed: case-folded": "Stra\u00dfe",
    "came back as '{}'": "",
    "came back as 'null'": "",
    "came back as '\"\"'": "",
    "a JSON string unwrapped": '"just a string"',
    "text wrapped in a JSON string": "plain",
    "non-ASCII escaped as JSON": "caf\u00e9",
    "percent escapes decoded": "user%41",
    "percent-encoded": "a b/c",
    "HTML entities decoded": "a &amp; b",
    "HTML-escaped": "a & b",
    "backslash escapes decoded": "line\\nnext",
    "backslashes doubled": "C:\\dir",
    "C1 controls read back as their Windows-1252": "quote \x91x\x92",
    "UTF-8 bytes read as latin-1": "caf\u00e9",
    "UTF-8 bytes read as Windows-1252": "caf\u00e9 \u20ac",
    "outside the Basic Multilingual Plane replaced by '?'": "hi \U0001f600",
    "outside latin-1 replaced by '?'": "caf\u00e9 \u20ac",
    "non-ASCII characters replaced by '?'": "caf\u00e9",
    "non-ASCII characters replaced by U+FFFD": "caf\u00e9",
    "non-ASCII characters dropped": "caf\u00e9",
}


def _sample(line: str) -> str:
    return next(v for k, v in SAMPLES.items() if k in line)


def test_every_transform_has_a_sample() -> None:
    missing = [t.line for t in TRANSFORMS if not any(k in t.line for k in SAMPLES)]
    assert not missing, missing


@pytest.mark.parametrize("transform", TRANSFORMS, ids=lambda t: t.line[:40])
def test_each_transform_is_named_on_what_it_does(transform: object) -> None:
    line = transform.line  # type: ignore[attr-defined]
    sent = _sample(line)
    got = transform.apply(sent)  # type: ignore[attr-defined]
    assert got != sent, f"the sample for {line!r} is not changed by it"
    assert explain_text(sent, got) == line
    assert describe_text(sent, got) == line


@pytest.mark.parametrize("transform", [t for t in TRANSFORMS if t.length], ids=lambda t: t.line[:40])
def test_each_transform_keeps_to_its_length_claim(transform: object) -> None:
    """A transform is not tried on a value at a length it cannot make: its claim must hold."""
    values = [*SAMPLES.values(), "", " ", "%", "%zz%4", "&amp", "\\", "\\u12", '"\\ud800"', "\x00", "\r\n\r",
              "\u0130\u00df",
              "\u03a3\u0391\u03a3 \u03a3", "\ufb01\u1100\u1161\uac00",
              "\x85\x9f\ufffd", "\ud800\U0001f600", "\u20ac" * 3, "".join(map(chr, range(0x180)))]
    for sent in values:
        try:
            got = transform.apply(sent)  # type: ignore[attr-defined]
        except Exception:  # the engine takes a transform that raises as explaining nothing
            continue
        assert transform.could_make(sent, got), (transform.line, sent, got)  # type: ignore[attr-defined]


def test_a_cut_names_its_count_in_characters_and_bytes_and_the_common_width() -> None:
    sent = "\u00e9" * 300
    assert truncation(sent, sent[:255]) == (
        "truncated at 255 characters of 300 (510 bytes of 600): VARCHAR(255) or TINYTEXT, counted in characters")
    ascii_ = "x" * 5000
    assert explain_text(ascii_, ascii_[:4000]) == (
        "truncated at 4000 bytes of 5000: Oracle VARCHAR2(4000) or SQL Server NVARCHAR(4000)")
    odd = "y" * 100
    assert explain_text(odd, odd[:37]) == (
        "truncated at 37 bytes of 100 (a length-limited column such as TEXT or VARCHAR)")


def test_a_cut_inside_a_multibyte_character_is_named_at_its_byte_width() -> None:
    sent = "a" * 254 + "\u00e9" + "b"  # the 2-byte é straddles byte 255
    got = sent.encode()[:255].decode("utf-8", "ignore")
    line = explain_text(sent, got)
    assert line is not None and "254 bytes" in line
    assert "VARCHAR(255) or TINYTEXT, cut at 255 bytes mid-character" in line


def test_two_transforms_in_a_row_are_named_in_order() -> None:
    assert explain_text(" caf\u00e9 ", "caf?") == (
        "surrounding whitespace stripped, then non-ASCII characters replaced by '?' (an ASCII codec with replacement)")


def test_a_transform_then_a_cut() -> None:
    line = explain_text("Hello World", "hello")
    assert line == ("case changed: lowered, then truncated at 5 bytes of 11 "
                    "(a length-limited column such as TEXT or VARCHAR)")


def test_json_re_encoding_is_still_named_as_such() -> None:
    assert "raw JSON re-encoded (" in describe_text('{"z":1,"a":2}', '{"a": 2, "z": 1}')


def test_json_whitespace_inside_strings_is_not_whitespace_changed() -> None:
    """Only whitespace between tokens counts: a string's own spaces move with its key."""
    line = describe_text('{"a": "x   y", "b": "\\"  \\""}', '{"b": "\\"  \\"", "a": "x   y"}')
    assert "raw JSON re-encoded (keys reordered)" in line, line
    line = describe_text('{"a": "x  y"}', '{"a":"x  y"}')
    assert "raw JSON re-encoded (whitespace changed)" in line, line


def test_nothing_known_gives_a_minimal_diff() -> None:
    line = describe_text("the quick brown fox", "the quick red fox")
    assert line.startswith("text changed, by no known transform: first difference at character 10 (byte 10)")
    assert "sent “the quick brown fox”, got “the quick red fox”" in line.replace("…", "")
    assert "sent 19 characters (19 bytes), got 17 (17 bytes)" in line


def test_a_minimal_diff_counts_bytes_and_escapes_the_window() -> None:
    line = minimal_diff("\u00e9\u00e9\x01tail", "\u00e9\u00e9\x02tail")
    assert "character 2 (byte 4)" in line and "\\x01" in line and "\\x02" in line


# --- whole transcripts -------------------------------------------------------------------


def _user(*texts: str) -> list[Message]:
    return [Message.text("user", t) for t in texts]


def test_a_transcript_read_newest_first_is_named() -> None:
    sent = _user("a", "b", "c")
    assert describe_transcript(sent, sent[::-1]).startswith("messages came back newest first: all 3")


def test_twins_dropped_are_named_as_deduplicated() -> None:
    sent = _user("a", "b", "a", "c", "b")
    assert describe_transcript(sent, _user("a", "b", "c")).startswith("identical messages deduplicated: 5 saved, 3")


def test_adjacent_messages_of_one_role_merged_exactly_or_by_text() -> None:
    sent = [*_user("a", "b"), Message.text("assistant", "c"), *_user("d", "e", "f")]
    parts = [Message("user", sent[0].content + sent[1].content), sent[2],
             Message("user", sent[3].content + sent[4].content + sent[5].content)]
    assert "(their content parts joined)" in describe_transcript(sent, parts)
    joined = [Message.text("user", "a\n\nb"), sent[2], Message.text("user", "d e f")]
    line = describe_transcript(sent, joined)
    assert line.startswith("adjacent messages of the same role merged into one: 6 saved, 3 came back"), line
    assert "(their texts joined into one)" in line


def test_messages_lost_are_not_called_merged() -> None:
    sent = _user("a", "b", "c")
    line = describe_transcript(sent, _user("a"))
    assert "merged" not in line and line.startswith("messages lost: 1 of 3 came back"), line


# --- the most specific failure first -------------------------------------------------------


def test_a_cause_is_reported_before_the_symptom_it_causes() -> None:
    """A batch written item by item fails the clear race (a symptom: "the clear and the add
    interleaved") and the batch clause (the cause: "written item by item"); the report's
    failures put the cause first, while the rows keep their run order."""
    broken = next(b for b in registry() if b.name == "items-batch-item-by-item")
    race, batch = "clear_racing_add_lands_before_or_after", "a_batch_is_atomic_to_readers"
    report = check(broken.factory, clauses=[race, batch], seed=3)
    assert [r.clause for r in report.results] == [race, batch]
    assert [r.outcome for r in report.results] == ["failed", "failed"], report
    assert [r.clause for r in report.failures()] == [batch, race]
    assert "item by item" in report.failures()[0].diagnosis.partition("\n")[0]


# --- the store's own frames ------------------------------------------------------------------


class LossyCodecSession:
    """Keeps an item as (role, content) and decodes a tool output as if its call_id were kept."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str]] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = [self._decode(r) for r in self.rows]
        return items if limit is None else items[len(items) - limit:] if limit else []

    def _decode(self, row: tuple[str, str]) -> Any:
        fields = {"role": row[0], "content": row[1]}
        return {**fields, "call_id": fields["call_id"]} if row[0] == "tool" else fields

    async def add_items(self, items: list[Any]) -> None:
        self.rows += [(str(i.get("role", "tool")), str(i.get("content", i.get("output", "")))) for i in items]

    async def pop_item(self) -> Any:
        return self._decode(self.rows.pop()) if self.rows else None

    async def clear_session(self) -> None:
        self.rows.clear()


def lossy_opener() -> Any:
    sessions: dict[str, LossyCodecSession] = {}
    return lambda session_id: sessions.setdefault(session_id, LossyCodecSession())


def test_an_error_raised_inside_a_bound_store_names_the_stores_own_frame() -> None:
    """Through a binding, the store's code is the SDK session's, not the binding's: the
    line says where in it the error was raised (a lossy codec's KeyError)."""
    report = check(item_sessions(lossy_opener), clauses=["items_round_trip_exactly"], seed=1)
    line = report.results[0].diagnosis.partition("\n")[0]
    assert "raised KeyError: 'call_id' (at tests/test_explain.py:" in line, line
    assert "in _decode)" in line, line


# --- items: what the lost or extra items share ------------------------------------------------


def test_items_from_elsewhere_are_said_to_come_from_there() -> None:
    a, b, c = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}
    assert describe_items([a], [a, b]) == "1 item(s) that were never added came back"
    line = describe_items([a], [a, b], {"session 'x'": [c], "this session before a clear or pop took them": [b]})
    assert line == ("1 item(s) came back that belong to this session before a clear or pop took them, "
                    "not to what this session holds now")
    assert "belong to session 'x'" in describe_items([a], [a, c], {"session 'x'": [c]})
    d = {"role": "user", "content": "d"}
    mixed = describe_items([a], [a, b, c, d], {"session 'x'": [c], "this session before its clear": [b]})
    assert mixed == ("3 item(s) came back that are not this session's: they belong 1 to session 'x', 1 to this "
                     "session before its clear, 1 never added anywhere"), mixed


def test_twin_items_dropped_are_named_as_deduplicated() -> None:
    a, b = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    assert describe_items([a, b, a], [a, b]).startswith("identical items deduplicated: 3 added, 2 came back")


def test_a_limit_exceeded_and_a_limit_of_zero_are_named() -> None:
    items = [{"role": "user", "content": str(i)} for i in range(5)]
    assert describe_limit(items, 2, items[-4:]) == "get_items(2) returned the latest 4 items: more than the limit"
    assert describe_limit(items, 0, items).startswith("get_items(0) returned every item: LIMIT 0 read as no limit")


# --- steers: what the lost steers share ---------------------------------------------------------


def test_steers_lost_through_one_handle_are_said_so() -> None:
    """Every lost steer came through one handle while the other's came back, and one of
    them has no steer of the other handle with its number: not a replacement, said so."""
    from storetest._engine.failures import Check
    from storetest.clauses.steers import _Take, account

    added = ["p-0", "p-1", "p-2", "a1-0", "a1-1"]  # the prefill through handle 0, adder 1 through handle 1
    check = Check(test_steers_lost_through_one_handle_are_said_so)
    account(check, "s", added, [_Take(0, 0.0, 1.0, ["a1-0", "a1-1"])], handles=2)
    (violation,) = check.violations
    assert violation.diagnosis.startswith("3 steer(s) lost ('p-0', 'p-1', 'p-2';"), violation.diagnosis
    assert "every lost steer was added through the first handle while the other handle's came back" in \
        violation.diagnosis
    assert violation.labels == ("lost", "got") and violation.sent == "['p-0', 'p-1', 'p-2']", violation
    one = Check(test_steers_lost_through_one_handle_are_said_so)
    account(one, "s", added, [_Take(0, 0.0, 1.0, ["a1-0", "a1-1"])])
    assert "through the first handle" not in one.violations[0].diagnosis


def test_steers_two_handles_numbered_alike_are_named_as_replaced() -> None:
    """Each lost steer has a taken twin of the other handle with its number in its
    handle's sequence, and no take held two steers with one number: the accounting names
    the numbering, not an add that was not committed."""
    from storetest._engine.failures import Check
    from storetest.clauses.steers import _Take, account

    added = ["p-0", "p-1", "a1-0", "a1-1"]
    check = Check(test_steers_two_handles_numbered_alike_are_named_as_replaced)
    account(check, "s", added, [_Take(0, 0.0, 1.0, ["a1-0", "a1-1"])], handles=2)
    line = check.violations[0].diagnosis
    assert line.startswith("2 steer(s) replaced ('p-0', 'p-1', each by another handle's steer with its number): "
                           "two handles numbered their steers alike"), line
    assert "not committed" not in line, line
    # A take holding two steers with one number: a queue keyed by the number cannot.
    both = Check(test_steers_two_handles_numbered_alike_are_named_as_replaced)
    account(both, "s", [*added, "p-2"], [_Take(0, 0.0, 1.0, ["p-2", "a1-0", "a1-1", "p-1"])], handles=2)
    assert "replaced" not in both.violations[0].diagnosis, both.violations[0].diagnosis


def test_the_state_machine_names_steers_numbered_alike() -> None:
    """The model knows which handle added each steer: the shrunk story (two handles, one
    identical text each) is the numbering, not identical steers merged."""
    from tests.broken_stores.explained_variants import PerHandleNumbersStore

    report = check(PerHandleNumbersStore, lambda primary: primary.replica(), clauses=["store_matches_model"], seed=7)
    line = report.results[0].diagnosis.partition("\n")[0]
    assert "steer(s) replaced: two handles numbered their steers alike" in line, line


def test_the_model_tells_numbered_alike_from_identical_steers_merged() -> None:
    """The same texts, one steer lost: through two handles with one number each, it is the
    numbering; through one handle (numbers 0 and 1), identical steers merged."""
    two = describe_steers(["a", "a"], ["a"], numbers=[(0, 0), (1, 0)])
    assert two.startswith("1 steer(s) replaced: two handles numbered their steers alike"), two
    one = describe_steers(["a", "a"], ["a"], numbers=[(0, 0), (0, 1)])
    assert one.startswith("identical steers merged into one"), one
    assert describe_steers(["a", "b"], ["b"], numbers=[(0, 0), (1, 0)]).startswith("1 steer(s) replaced")
    assert describe_steers(["a", "b"], ["b"]) == "1 steer(s) lost: 'a'"
    # In number order but nothing replaced: a reorder, not the numbering.
    assert describe_steers(["a", "b"], ["b", "a"], numbers=[(0, 1), (1, 0)]).startswith("steers returned last-in")


def test_a_dropped_steer_is_not_called_aliasing_or_a_cache() -> None:
    """A store that drops a steer for a session with no transcript: the aliasing clause
    saw an empty first take (nothing aliased), the replica clause saw neither handle take
    the steer (no cache): both say the steer was lost."""
    from tests.broken_stores.explained_variants import SteersNeedATranscriptStore

    report = check(SteersNeedATranscriptStore, lambda primary: primary.replica(), seed=1,
                   clauses=["stored_data_is_not_aliased", "steers_are_taken_once_across_replicas"])
    aliasing = report.results[0].diagnosis.partition("\n")[0]
    assert aliasing.startswith("1 steer(s) lost: 'first'"), aliasing
    assert "neither the handle that added it nor the other can take it" in " ".join(
        v.diagnosis for r in report.results[1:] for v in r.violations), report.results[1].details


def test_a_clear_that_empties_another_session_is_named_as_a_clear_by_pattern() -> None:
    """The item state machine names a clear of 'x' that also emptied 'x:messages'. Only a
    random interleaving reaches it in the state machine (clear_session_empties_it, the store's
    intended clause, catches it on every seed with its own message), so the seed is fixed here."""
    from tests.broken_stores.item_variants import ClearByPrefix, _opener

    report = check(item_sessions(_opener(ClearByPrefix)), clauses=["item_history_matches_model"], seed=1)
    line = report.results[0].diagnosis.partition("\n")[0]
    assert "emptied this session too (a clear by key pattern or prefix" in line, line


# --- a type or role mapped to another, fields, numbers --------------------------------------------


def test_a_message_kind_mapped_to_another_is_named() -> None:
    tool = {"type": "tool", "data": {"content": "ok", "type": "tool", "tool_call_id": "c", "name": None}}
    assert describe_item(tool, {"role": "assistant", "content": "ok"}).startswith(
        "a type or role mapped to another: a ToolMessage came back as an AIMessage"), describe_item(tool, {})
    human_as_ai = describe_item({"role": "user", "content": "x"}, {"type": "ai", "data": {"content": "x"}})
    assert human_as_ai.startswith("a type or role mapped to another: a HumanMessage came back as an AIMessage")
    line = describe_item({"role": "tool", "content": "x"}, {"role": "assistant", "content": "x"})
    assert line.startswith("a type or role mapped to another: an item of type 'message', role 'tool' came back "
                           "as an item of type 'message', role 'assistant'"), line
    output = {"type": "function_call_output", "call_id": "c", "output": "x"}
    assert "an item of type 'function_call_output' came back as an item of type 'message', role 'assistant'" in \
        describe_item(output, {"type": "message", "role": "assistant", "content": "x"})


def test_a_field_renamed_defaulted_or_a_number_coerced_is_named() -> None:
    sent = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    renamed = describe_item(sent, {"type": "function_call_output", "tool_call_id": "c1", "output": "x"})
    assert renamed == "at .call_id: the field came back renamed to 'tool_call_id', its value kept", renamed
    dropped = describe_item(sent, {"type": "function_call_output", "output": "x"})
    assert dropped == "at .call_id: the key was dropped (it held 'c1')", dropped
    defaulted = describe_item({"role": "user", "content": "x", "name": "alice"},
                              {"role": "user", "content": "x", "name": None})
    assert defaulted.startswith("at .name: 'alice' came back as None, the field's default"), defaulted
    assert describe_item({"n": True}, {"n": False}).startswith("at .n: True came back as False, the field's default")
    coerced = describe_item({"n": 1.5}, {"n": "1.5"})
    assert coerced.startswith("at .n: the number 1.5 came back as the string '1.5': numbers coerced to text"), coerced


# --- items: where the lost items were ----------------------------------------------------------


def test_lost_items_are_placed_by_position_and_batch() -> None:
    items = [{"role": "user", "content": str(i)} for i in range(7)]
    batches = [2, 2, 3]
    assert describe_items(items, items[:4], batches=batches) == (
        "the last 3 item(s) were lost: every item after position 3 (batch #2 of 3, whole: an add_items() call "
        "acknowledged and not kept, or its write overwritten by the next)")
    assert describe_items(items, items[:2] + items[4:], batches=batches).startswith(
        "2 item(s) lost of 7: #2 to #3 (batch #1 of 3, whole")
    assert describe_items(items, items[:3] + items[4:], batches=batches).startswith(
        "1 item(s) lost of 7: #3 (batch #1 of 3 in part: 1 of its 2 items")
    across = describe_items(items, items[:3], batches=batches)
    assert across.startswith("the last 4 item(s) were lost: every item after position 2 (across a batch boundary, "
                             "from batch #1 to batch #2 of 3: the loss follows positions"), across
    assert describe_items(items, items[:3]) == "the last 4 item(s) were lost: every item after position 2"


def test_a_limited_read_that_starts_past_the_items_is_named() -> None:
    items = [{"role": "user", "content": str(i)} for i in range(3)]
    line = describe_limit(items, 2, items[-1:])
    assert line.startswith("get_items(2) returned only the latest 1 of the 2 items asked for (3 stored): the read "
                           "started past the items"), line
    assert describe_limit(items, 1, []).startswith("get_items(1) returned [] (3 stored): the read started past")


def test_a_reordered_history_is_one_reshape_not_every_item_changed() -> None:
    """The round trip compares item by item only when the order was kept."""
    from tests.broken_stores.explained_variants import NewestFirstItems, _item_opener

    report = check(item_sessions(_item_opener(NewestFirstItems)), clauses=["items_round_trip_exactly"], seed=1)
    (first, *_) = report.results[0].violations
    assert first.diagnosis == "items came back newest first (the protocol's order is oldest first)", first


# --- labels --------------------------------------------------------------------------------------


def test_violation_values_carry_the_label_of_what_they_are() -> None:
    """sent/got for a round trip; expected/got when the right answer is not what was sent
    (an empty list expected is never 'sent'); lost/duplicated (else unexpected) for an
    account; both values printed the same way, aligned."""
    from storetest._engine.failures import Check, Violation

    check = Check(test_violation_values_carry_the_label_of_what_they_are)
    check.add("s", "round trip", ["a"], ["b"])
    check.add("s", "model", expected=["a"], got=["b"])
    check.add("s", "race", lost=["a"], duplicated=["b"], unexpected=["c"])
    check.add("s", "race", lost=["a"], unexpected=["c"])
    check.differs("s", "after a clear", [], ["x"])
    check.differs("s", "after a write", ["x"], [])
    check.transcript("s", [], [Message.text("user", "x")])
    check.steers("s", ["a"], [], expected=True)
    labels = [v.labels for v in check.violations]
    assert labels == [("sent", "got"), ("expected", "got"), ("lost", "duplicated"), ("lost", "unexpected"),
                      ("expected", "got"), ("sent", "got"), ("expected", "got"), ("expected", "got")], labels
    assert check.violations[1].lines() == ["session 's': model", "    expected: ['a']", "    got:      ['b']"]
    assert check.violations[0].lines()[1:] == ["    sent: ['a']", "    got:  ['b']"]
    # A JSON report gives the labels back as a list: the violation is the same.
    assert Violation("s", "d", "x", "y", ["lost", "duplicated"]) == Violation("s", "d", "x", "y",  # type: ignore[arg-type]
                                                                              ("lost", "duplicated"))


def test_the_report_schema_lists_every_label() -> None:
    import json
    from pathlib import Path

    import storetest
    from storetest._engine.failures import LABELS

    schema = json.loads((Path(storetest.__file__).parent / "report.schema.json").read_text())
    assert tuple(schema["$defs"]["violation"]["properties"]["labels"]["items"]["enum"]) == LABELS


def test_no_clause_labels_a_count_or_a_word_as_sent() -> None:
    """What the issue found: 'sent: "e.g. lost [...]"' and 'sent: []' for an expected
    result. No clause builds such a value any more."""
    import re
    from pathlib import Path

    import storetest

    for path in (Path(storetest.__file__).parent / "clauses").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"e\.g\. (lost|duplicated)", text), path
        assert not re.search(r"sent=f\"", text), path


# --- the shapes docs/contract.md lists, each on a value only it explains -------------------------

_M = [Message.text("user", f"m{i}") for i in range(4)]
_ITEMS = [{"role": "user", "content": str(i)} for i in range(6)]

#: For each of SHAPES' lines, a call whose line carries it.
SHAPE_SAMPLES: dict[str, Any] = {
    "messages came back newest first": lambda: describe_transcript(_M, _M[::-1]),
    "identical messages deduplicated": lambda: describe_transcript([_M[0], _M[0], _M[1]], [_M[0], _M[1]]),
    "adjacent messages of the same role merged into one": lambda: describe_transcript(
        _M[:2], [Message("user", _M[0].content + _M[1].content)]),
    "the save was ignored: the previous transcript is still there": lambda: describe_transcript(_M[:1], _M[1:2],
                                                                                                _M[1:2]),
    "saving an empty list left the old transcript in place": lambda: describe_transcript([], _M[:2], _M[:2]),
    "appended instead of replaced": lambda: describe_transcript(_M[2:], _M, _M[:2]),
    "messages reordered: they came back in the saved positions": lambda: describe_transcript(
        _M, [_M[1], _M[0], _M[2], _M[3]]),
    "content parts reordered: they came back in the saved positions": lambda: describe_transcript(
        [Message("user", _M[0].content + _M[1].content)], [Message("user", _M[1].content + _M[0].content)]),
    "attachment bytes decoded as text": lambda: describe_transcript(
        [Message("user", (Attachment("image/png", b"PNG\xff"),))],
        [Message("user", (Attachment("image/png", "PNG\ufffd".encode()),))]),
    "sessions merged: reading": None,  # a clause's line: test_a_case_merge_is_named_as_a_merge_in_the_state_machine
    "raw JSON re-encoded": lambda: describe_text('{"a":1}', '{"a": 1}'),
    "items came back newest first": lambda: describe_items(_ITEMS, _ITEMS[::-1]),
    "identical items deduplicated": lambda: describe_items([_ITEMS[0], _ITEMS[0], _ITEMS[1]], _ITEMS[:2]),
    "a type or role mapped to another": lambda: describe_item({"role": "tool", "content": "x"},
                                                              {"role": "assistant", "content": "x"}),
    "the field came back renamed to": lambda: describe_item({"a": 1}, {"b": 1}),
    "the field's default": lambda: describe_item({"a": "x"}, {"a": ""}),
    "numbers coerced to text": lambda: describe_item({"a": 2}, {"a": "2"}),
    "came back as the integer": lambda: describe_item({"a": 1.0}, {"a": 1}),
    "came back as the float": lambda: describe_item({"a": 2**53 + 1}, {"a": float(2**53 + 1)}),
    "item(s) came back that belong to": lambda: describe_items(_ITEMS[:1], _ITEMS[:2], {"session 'x'": _ITEMS}),
    "every session holds the items of every other": None,  # the isolation clause's: items-one-list-for-every-session
    "every item after position": lambda: describe_items(_ITEMS, _ITEMS[:2]),
    "whole: an add_items() call acknowledged and not kept": lambda: describe_items(
        _ITEMS, _ITEMS[:3] + _ITEMS[5:], batches=[3, 2, 1]),
    "in part": lambda: describe_items(_ITEMS, _ITEMS[:1] + _ITEMS[2:], batches=[3, 3]),
    "across a batch boundary": lambda: describe_items(_ITEMS, _ITEMS[:2] + _ITEMS[4:], batches=[3, 3]),
    "LIMIT 0 read as no limit": lambda: describe_limit(_ITEMS, 0, _ITEMS),
    "the read started past the items": lambda: describe_limit(_ITEMS, 3, _ITEMS[-1:]),
    "returned the oldest": lambda: describe_limit(_ITEMS, 2, _ITEMS[:2]),
    "two handles numbered their steers alike": lambda: describe_steers(["a", "b"], ["b"], [(0, 0), (1, 0)]),
    "identical steers merged into one": lambda: describe_steers(["a", "a"], ["a"]),
    "steers returned last-in-first-out": lambda: describe_steers(["a", "b", "c"], ["c", "b", "a"]),
    "a take capped by a page size or a byte budget": lambda: describe_steers(["a", "b"], ["a"]),
    "taken before came back again": lambda: describe_steers(["c"], ["a", "b", "c"], taken=["a", "b"]),
    "a cached \"queue is empty\" that another handle's add did not invalidate": lambda: describe_unseen_steers(
        1, ["a"], [0], ["a"], found_empty=True, sees_fresh=True),
}


def test_every_shape_docs_list_has_a_sample() -> None:
    from storetest._engine.explain import SHAPES

    assert [words for _, words in SHAPES] == list(SHAPE_SAMPLES)


@pytest.mark.parametrize("words", [w for w, make in SHAPE_SAMPLES.items() if make is not None])
def test_each_shape_names_itself(words: str) -> None:
    line = SHAPE_SAMPLES[words]()
    assert words in line, line
    # Only its own words: no other shape's line explains this value too.
    others = [w for w in SHAPE_SAMPLES if w != words and w in line and w not in words and words not in w]
    assert not others, (line, others)


def test_backslash_decoding_keeps_unknown_escapes_without_a_warning() -> None:
    """``unicode_escape`` warns on ``\\d`` (a DeprecationWarning, every run of a store
    that stores regex text); unknown escapes are kept by hand, as it would keep them."""
    import warnings

    from storetest._engine.explain import backslash_decoded

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backslash_decoded("a\\d\\\\d\\n\\u00e9\\\u65e5") == "a\\d\\d\né\\\u65e5"
        assert backslash_decoded("ends\\") == "ends\\"
