"""``storetest.check()``: the one way the suite runs, as the plugin, the command and a
store author's own code use it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from reference_stores.memory import MemoryStore
from storetest import Message, check, check_messages, check_session_id
from storetest.clauses import CLAUSES
from storetest.report import render_text

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
NAMES = [c.name for c in CLAUSES]
STEER_CLAUSES = {c.name for c in CLAUSES if "steers" in c.needs}
LOG_CLAUSES = {c.name for c in CLAUSES if "log" in c.needs}  # an entry-log store's
ITEM_CLAUSES = {c.name for c in CLAUSES if "items" in c.needs}  # an item history's
ITEM_CLAUSES |= {c.name for c in CLAUSES if "adk" in c.needs}  # and an ADK session service's
ITEM_CLAUSES |= {c.name for c in CLAUSES if "checkpoints" in c.needs}  # and a LangGraph checkpointer's
ITEM_CLAUSES |= {c.name for c in CLAUSES if "deletes" in c.needs}  # and a whole-session store's delete
IDLE_CLAUSES = {c.name for c in CLAUSES if c.idle}  # opt-in: skipped without idle=
#: Opt-in too: skipped without reopen= (a store without their capability does not claim them).
CRASH_CLAUSES = {c.name for c in CLAUSES if c.reopen}
OPT_IN_CRASH = CRASH_CLAUSES - LOG_CLAUSES - ITEM_CLAUSES  # those a transcript-and-steers store claims


class TranscriptOnlyStore:
    """Most chat-history stores: a transcript and no steer queue."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[Message, ...]] = {}

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        self.data[check_session_id(session)] = check_messages(messages)

    async def messages(self, session: str) -> list[Message]:
        return list(self.data.get(check_session_id(session), ()))


class ForgotTakeSteers(TranscriptOnlyStore):
    async def add_steer(self, session: str, text: str) -> None:
        raise AssertionError("never called: the store does not claim steers")


def test_a_transcript_only_store_passes_with_the_steer_clauses_not_claimed() -> None:
    first = TranscriptOnlyStore()
    report = check(lambda: first, lambda: first, seed=1)
    assert report.capabilities == ("transcript",)
    assert report.ok, str(report)
    outcomes = {r.clause: r.outcome for r in report.results}
    assert {n for n, o in outcomes.items() if o == "not claimed"} == STEER_CLAUSES | LOG_CLAUSES | ITEM_CLAUSES
    assert {n for n, o in outcomes.items() if o == "passed"} == (
        set(NAMES) - STEER_CLAUSES - LOG_CLAUSES - ITEM_CLAUSES - IDLE_CLAUSES - CRASH_CLAUSES)
    assert {n for n, o in outcomes.items() if o == "skipped"} == IDLE_CLAUSES | {"saves_survive_a_crash"}
    assert "claims: transcript" in render_text(report)


def test_a_store_that_forgot_take_steers_is_visible() -> None:
    report = check(ForgotTakeSteers, clauses=["steers_are_taken_in_order_exactly_once"], seed=1)
    assert report.partial == {"steers": ["add_steer"]}
    assert report.results[0].outcome == "not claimed"
    assert "steers only in part (has add_steer)" in render_text(report)


def _plugin_clauses(pytester: pytest.Pytester) -> list[str]:
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(test_memory="""
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore, replica=lambda primary: primary.replica(), name="memory")
    """)
    report = pytester.path / "plugin.json"
    # The log clauses are not tests at all (the class says what its stores claim); the report names them.
    pytester.runpytest("-p", "no:cacheprovider", f"--storetest-report={report}").assert_outcomes(
        passed=len(NAMES) - len(LOG_CLAUSES | ITEM_CLAUSES) - len(IDLE_CLAUSES | OPT_IN_CRASH),
        skipped=len(IDLE_CLAUSES | OPT_IN_CRASH))
    return [r["clause"] for r in json.loads(report.read_text())["runs"][0]["results"]]


def _cli_clauses(tmp_path: Path) -> list[str]:
    (tmp_path / "stores.py").write_text(textwrap.dedent("""
        from reference_stores.memory import MemoryStore
        def store():
            return MemoryStore()
        def replica(primary):
            return primary.replica()
    """))
    report = tmp_path / "cli.json"
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "stores:store", "--replica",
                           "stores:replica", "--report", str(report), "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [r["clause"] for r in json.loads(report.read_text())["runs"][0]["results"]]


def test_every_registered_clause_runs_in_the_plugin_the_command_and_check(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    direct = [r.clause for r in check(MemoryStore, lambda primary: primary.replica(), seed=2).results]
    assert direct == NAMES
    assert _cli_clauses(tmp_path) == NAMES
    assert _plugin_clauses(pytester) == NAMES


def test_bad_arguments_say_what_to_write() -> None:
    with pytest.raises(ValueError, match=r"unknown clauses.*no_such_clause"):
        check(MemoryStore, clauses=["no_such_clause"])
    with pytest.raises(TypeError, match="must be a callable"):
        check(MemoryStore())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="parameter 'pool' is not something check\\(\\) can supply"):
        check(lambda pool: MemoryStore())
    with pytest.raises(ValueError, match="unknown storetest profile"):
        check(MemoryStore, profile="nope")


def test_a_factory_that_raises_is_named_as_the_factory() -> None:
    def factory() -> MemoryStore:
        raise RuntimeError("cannot reach the database")

    result = check(factory, clauses=["unknown_session_is_empty"]).results[0]
    assert result.outcome == "error"
    assert result.diagnosis == ("the factory raised RuntimeError: cannot reach the database while making "
                                "the store")
