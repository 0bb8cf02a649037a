"""The first line a store author reads names the bug: the broken stores of the third
round (fields at their limits, key schemes, a racing conflicting append, reorders,
missing items, stories once told wrong, expiry), each caught by the clause meant for
it with the first line meant for it; and the limits, diagnoses and idle option they
rest on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reference_stores.memory import MemoryBackend, MemoryStore
from storetest import MAX_ID_BYTES, MAX_NAME_BYTES, Attachment, Message, ToolCall, ToolResult, check
from storetest._engine.diagnosis import describe_id_merge, describe_steers, describe_transcript, key_scheme_clash
from storetest._engine.explain import names_a_cause
from storetest._engine.failures import failure_listeners
from storetest._engine.strategies import filled
from storetest.entries import Custom, Entry
from tests.broken_stores import registry, run_clause
from tests.broken_stores.log_variants import RacyCreateLogStore
from tests.broken_stores.memory_variants import ExpiringStore

pytest_plugins = ["pytester"]

BROKEN = {b.name: b for b in registry()}

#: Each round-3 broken store, and what the first line of its diagnosis must contain.
FIRST_LINES = {
    "memory-tool-result-truncated": "ToolResult.content: truncated at 65532 bytes of 65536 (65531 characters of "
    "65532): MySQL TEXT or BLOB (65,535 bytes), cut at 65535 bytes mid-character",
    "memory-nul-refused-and-truncated": "Text.text: truncated at 65532 bytes of 65536 (65531 characters of 65532): "
    "MySQL TEXT or BLOB (65,535 bytes), cut at 65535 bytes mid-character",
    "memory-tool-name-truncated": "ToolCall.name: truncated at 64 characters of 132 (122 bytes of 256): a 64-wide",
    "memory-attachment-truncated": "Attachment.data: truncated at 65535 bytes of 65536 (a length-limited column",
    "memory-media-type-normalized": "media_type: case changed",
    "memory-tool-calls-by-id": "3 content parts saved, 2 came back: 1 content part(s) lost: #0 (ToolCall(",
    "memory-recent-sessions-only": "session #0 of 200 was forgotten after the later ones were written",
    "memory-key-scheme": "keys built as prefix:<id> and prefix:<id>:<kind> collide",
    "memory-keys-by-pattern": "an id with glob characters (* ? [ ]) matched another id",
    "memory-positions-as-text": "messages reordered: they came back in the saved positions [0, 1, 10, 11,",
    "memory-parts-by-kind": "content parts reordered",
    "memory-take-first-thousand": "1 steer(s) lost: 'queued #1000 ",
    "memory-chunk-boundary": "2000 messages saved, 1997 came back: 3 message(s) lost: #500 (user 'long #500')",
    "memory-unrelated-errors": "raised StoreError: save to session",
    "memory-expiring": "after 1 s idle: the transcript expired",
    "log-unlocked-id-check": "entry id 'shared' stored",
    "log-times-milliseconds-refusing": "ids intact: entry 'e0': created_at truncated to milliseconds",
    "log-times-utc-compacting": "after compaction: entry 'e0': UTC offset lost",
    "log-sorted-by-time-round-trip": "entries read back sorted by creation time",
}


@pytest.mark.parametrize("name", sorted(FIRST_LINES))
def test_the_first_line_names_the_bug(name: str, request: pytest.FixtureRequest) -> None:
    broken = BROKEN[name]
    failure = run_clause(broken, request.getfixturevalue, seed=11)
    assert failure is not None, f"{broken.clause} passed {name}"
    assert failure.clause == broken.clause
    first = failure.diagnosis.splitlines()[0]
    assert FIRST_LINES[name] in first, first
    # Unrelated refusals are not told as a poisoned connection.
    assert "later call" not in first, first


def test_a_key_scheme_collision_is_named_with_the_failing_call(request: pytest.FixtureRequest) -> None:
    failure = run_clause(BROKEN["memory-key-scheme"], request.getfixturevalue, seed=3)
    assert failure is not None
    assert "an id was merged with the id it starts with plus ':messages'" in failure.diagnosis, failure.diagnosis
    assert ":messages" in failure.diagnosis


def test_racing_creates_label_what_they_show() -> None:
    """'sent:' is an input; the creates' return values go in the diagnosis instead."""
    result = check(RacyCreateLogStore, clauses=["log_racing_creates_have_one_winner"], seed=2).results[0]
    assert result.outcome == "failed"
    (first, *_) = result.violations
    assert "they returned [" in first.diagnosis and first.sent == "", first


def test_a_case_merge_is_named_as_a_merge_in_the_state_machine() -> None:
    result = check(BROKEN["memory-id-lowercased"].factory, clauses=["store_matches_model"], seed=4).results[0]
    assert result.outcome == "failed"
    assert result.diagnosis.startswith("sessions merged: reading"), result.diagnosis
    assert "case" in result.diagnosis, result.diagnosis


class _SteersPerHandle(MemoryStore):
    """Steers kept in the handle (process memory): no handle sees another's."""

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.queues: dict[str, list[str]] = {}

    def replica(self) -> MemoryStore:
        return _SteersPerHandle(self.backend)

    async def add_steer(self, session: str, text: str) -> None:
        self.queues.setdefault(session, []).append(text)

    async def take_steers(self, session: str) -> list[str]:
        return self.queues.pop(session, [])


def test_a_negative_steer_cache_is_named_in_the_state_machine() -> None:
    """The state machine names the cache on its evidence: the taker found the queue empty
    before, the adding handle can take the steers, and the taker sees that handle's steer
    on a new session. It finds the cache on some seeds only (the replica clause is the
    one meant to catch it on every seed): every seed of the first ten that fails names
    it."""
    broken = BROKEN["memory-negative-steer-cache"]
    failed = [r for seed in range(1, 11)
              if (r := check(broken.factory, broken.replica, clauses=["store_matches_model"],
                             seed=seed).results[0]).outcome == "failed"]
    assert len(failed) >= 2, [r.outcome for r in failed]
    for result in failed:
        assert 'a cached "queue is empty" that another handle\'s add did not invalidate' in result.diagnosis, \
            result.diagnosis


def test_steers_kept_per_handle_are_not_called_a_cache() -> None:
    """The same [] from a store whose handles never see each other's steers: no cache is
    blamed, as the taker does not see the other handle's steer on a new session either."""
    result = check(_SteersPerHandle, lambda primary: primary.replica(), clauses=["store_matches_model"],
                   seed=7).results[0]
    assert result.outcome == "failed"
    first = result.diagnosis.splitlines()[0]
    assert "cached" not in first, first
    assert "did not see them (nor a steer handle" in first, first


def test_a_raise_named_with_the_store_frame_names_its_cause() -> None:
    """A call the store raised on, with the store's own frame, counts as naming its cause
    (shrunk by shrink_steps_named); the same raise with no frame of the store's does not."""
    named = "save() raised StoreError: refused (at mystore/db.py:12 in save)"
    assert names_a_cause(named)
    assert names_a_cause("save() on the factory's store raised OSError: disk full (at store.py:3 in _write)")
    assert not names_a_cause("the store raised StoreError: refused")
    assert not names_a_cause("save() raised StoreError: refused")


def test_the_state_machine_names_a_raise_as_it_happens() -> None:
    """A store's exception no rule catches ends the state machine's example: the failure
    listeners hear the call, the exception and the store's frame when it is raised (so
    shrinking is cut as for a named cause), and the verdict's first line is that line."""
    heard: list[str] = []
    failure_listeners.append(heard.append)
    try:
        broken = BROKEN["memory-unrelated-errors"]
        result = check(broken.factory, clauses=["store_matches_model"], seed=7).results[0]
    finally:
        failure_listeners.remove(heard.append)
    assert result.outcome == "failed"
    assert heard and heard[0].startswith("save() on the factory's store raised StoreError: save to session"), heard
    assert heard[0].endswith("in save)") and names_a_cause(heard[0]), heard[0]
    assert result.diagnosis.startswith("save() on the factory's store raised StoreError"), result.diagnosis
    assert "(at tests/broken_stores/memory_variants.py:" in result.diagnosis, result.diagnosis


# --- the limits --------------------------------------------------------------------------


def test_every_short_field_holds_its_limit_and_refuses_one_byte_more() -> None:
    at_id, at_name = filled("c", MAX_ID_BYTES), filled("n", MAX_NAME_BYTES)
    assert len(at_id.encode()) == MAX_ID_BYTES and len(at_name.encode()) == MAX_NAME_BYTES
    ToolCall(at_id, at_name, "{}")
    ToolResult(at_id, "x")
    Attachment(at_name, b"")
    Custom(at_name, "{}")
    when = datetime.now(UTC)
    Entry(at_id, filled("p", MAX_ID_BYTES), when, "message", Message.text("user", "x"))
    too_long = [
        ("ToolCall.id", lambda: ToolCall(at_id + "x", "n", "{}")),
        ("ToolCall.name", lambda: ToolCall("c", at_name + "é", "{}")),
        ("ToolResult.call_id", lambda: ToolResult(at_id + "x", "x")),
        ("Attachment.media_type", lambda: Attachment(at_name + "x", b"")),
        ("Custom.kind", lambda: Custom(at_name + "x", "{}")),
        ("Entry.id", lambda: Entry(at_id + "x", None, when, "message", Message.text("user", "x"))),
        ("Entry.parent_id", lambda: Entry("a", at_id + "x", when, "message", Message.text("user", "x"))),
    ]
    for field, make in too_long:
        with pytest.raises(ValueError, match=rf"{field} is \d+ bytes of UTF-8; the limit is"):
            make()


# --- the diagnoses -----------------------------------------------------------------------


def test_missing_and_extra_messages_are_named_by_position_and_excerpt() -> None:
    sent = [Message.text("user", f"m{i}") for i in range(5)]
    got = [sent[0], sent[1], sent[3], Message.text("user", "stranger"), sent[4], sent[4]]
    line = describe_transcript(sent, got)
    assert "1 message(s) lost: #2 (user 'm2')" in line, line
    assert "message(s) never saved came back: #3 (user 'stranger')" in line, line


def test_lost_steers_are_named() -> None:
    assert describe_steers(["a", "b", "c"], ["a"]) == (
        "2 steer(s) lost: 'b', 'c' (the take returned only the first 1 of 3 steers, 1 of 3 bytes: a take capped "
        "by a page size or a byte budget)")
    assert describe_steers(["a", "b", "c"], ["b"]) == "2 steer(s) lost: 'a', 'c'"


def test_key_scheme_confusables_are_told_apart_from_collations() -> None:
    assert "prefix:<id>:<kind> collide" in describe_id_merge("x", "x:messages")
    assert "glob characters" in describe_id_merge("x[ab]", "xa")
    clash = key_scheme_clash("x:steers", ["x", "y", "x:steers"])
    assert clash.startswith("an id was merged with the id it starts with plus ':steers'"), clash
    assert key_scheme_clash("y", ["x", "y"]) == ""


# --- the idle check ----------------------------------------------------------------------


def test_idle_is_opt_in_and_refuses_nonsense() -> None:
    (skipped,) = check(MemoryStore, clauses=["data_survives_idle"], seed=1).results
    assert skipped.outcome == "skipped" and "--storetest-idle SECONDS" in skipped.diagnosis
    (passed,) = check(MemoryStore, clauses=["data_survives_idle"], seed=1, idle=0.05).results
    assert passed.outcome == "passed", passed
    for bad in (0, -1, "soon", float("nan")):
        with pytest.raises(ValueError, match="idle must be a number of seconds"):
            check(MemoryStore, clauses=["data_survives_idle"], idle=bad)  # type: ignore[arg-type]


def test_only_the_idle_clause_sees_a_store_whose_keys_expire() -> None:
    """What docs/contract.md says the suite cannot see without the option."""
    report = check(ExpiringStore, lambda primary: primary.replica(), seed=6)
    # The crash clauses are skipped too (opt-in: no reopen=).
    assert [r.clause for r in report.results if r.outcome not in ("passed", "not claimed") and r.topic != "crash"] == \
        ["data_survives_idle"], str(report)


def test_storetest_check_idle_catches_an_expiring_store(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", "tests.broken_stores.memory_variants:ExpiringStore",
         "--idle", "0.8", "-k", "data_survives_idle"],
        capture_output=True, text=True, cwd=root, timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the transcript expired" in result.stdout
    assert "--idle 0.8" in result.stdout  # the replay command keeps the option


def test_the_plugin_option_runs_the_idle_clause(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(Path(__file__).resolve().parent.parent)
    pytester.makepyfile(test_idle=textwrap.dedent("""
        from storetest import run_conformance
        from tests.broken_stores.memory_variants import ExpiringStore

        run_conformance(ExpiringStore, name="expiring")
    """))
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "data_survives_idle", "--storetest-idle=0.8")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "the transcript expired" in result.stdout.str()
    usage = pytester.runpytest("-p", "no:cacheprovider", "--storetest-idle=-2")
    assert usage.ret == pytest.ExitCode.USAGE_ERROR
