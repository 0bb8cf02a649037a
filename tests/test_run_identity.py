"""What a run is called, what its report says of it, and counts that add up (issue 44).

- A run is named after the store's class (a binding's: the class of the sessions its
  opener makes), or what the author names it (``--name``, ``name=``, the name the
  target or the test module gives the factory); never "store", "ItemHistory" or the
  outer factory's name when the class is known. Before: "store" (pytest, a lambda),
  "ItemHistory" (the command line), "chat_opener" (pytest, a named outer factory).
- The report's ``target`` is the target as typed (``notes.py:sessions``), not the inner
  function; no ``replica`` nobody gave (a binding opens its own second handle).
- One nonce: the pytest table's is the one its replay line passes to ``--storetest-nonce``.
- A factory past the deadline is said once, not twice.
- The summary's counts add up: the verdicts and the clauses not reached make the
  clauses selected, the store's unclaimed ones apart; the deselected make the rest.
- A plain item session's call past the deadline is abandoned (its thread cannot be
  stopped), not "cancelled".
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import storetest
from storetest.bindings.openai_agents import item_sessions
from storetest.clauses import CLAUSES
from storetest.results import Report, interrupted_line, summary_line

NOTES = '''
import asyncio
from reference_stores.memory import MemoryStore
from storetest import item_sessions, run_conformance


class Notes:
    """A plain item session."""

    def __init__(self, session_id):
        self.items = []

    def get_items(self, limit=None):
        return list(self.items) if limit is None else list(self.items)[len(self.items) - limit:]

    def add_items(self, items):
        self.items.extend(items)

    def pop_item(self):
        return self.items.pop() if self.items else None

    def clear_session(self):
        self.items.clear()


class Lifo(MemoryStore):
    async def take_steers(self, session):
        return (await super().take_steers(session))[::-1]


sessions = item_sessions(lambda: Notes)
failing = item_sessions(lambda: None)


def chat_opener():
    return Notes


async def hangs():
    await asyncio.sleep(3600)
'''

TEST_FILE = '''
from notes import Lifo, chat_opener, sessions
from storetest import item_sessions, run_conformance

run_conformance(sessions)
run_conformance(item_sessions(chat_opener))
run_conformance(lambda: Lifo())
'''

pytest_plugins = ["pytester"]

ITEMS = "items_keep_their_order"
STEERS = "steers_are_taken_in_order_exactly_once"


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "storetest.cli", "check", *args], cwd=tmp, capture_output=True,
                          text=True, timeout=600)


def test_the_command_names_the_run_after_the_store_and_shows_the_target_as_typed(tmp_path: Path) -> None:
    (tmp_path / "notes.py").write_text(NOTES)
    done = _cli(tmp_path, "notes.py:sessions", "-k", ITEMS, "-q", "--report", "r.json", "--report", "r.md")
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = json.loads((tmp_path / "r.json").read_text())["runs"]
    assert (run["name"], run["target"], run["replica"]) == ("Notes", "notes.py:sessions", ""), run
    assert "\nNotes: 1 of " in done.stdout, done.stdout
    markdown = (tmp_path / "r.md").read_text()
    assert "## Notes\n" in markdown and "- target: `notes.py:sessions`\n" in markdown and "replica:" not in markdown
    # No store was made: the name the target gives the factory, not "store".
    failed = _cli(tmp_path, "notes.py:failing", "-k", ITEMS, "-q")
    assert failed.returncode == 1 and "\nfailing: 1 of " in failed.stdout, failed.stdout
    named = _cli(tmp_path, "notes.py:sessions", "-k", ITEMS, "-q", "--name", "mine")
    assert "\nmine: 1 of " in named.stdout, named.stdout


def test_pytest_names_each_run_after_its_store_and_uses_one_nonce(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(notes=NOTES, test_names=TEST_FILE)
    report = pytester.path / "r.json"
    result = pytester.runpytest("-p", "no:randomly", "-k", f"{ITEMS} or {STEERS}", f"--storetest-report={report}")
    result.assert_outcomes(passed=2, failed=1, skipped=1)  # the lambda's store does not claim items
    runs = {run["name"]: run for run in json.loads(report.read_text())["runs"]}
    # Two runs of one class keep the names the module gives their factories apart.
    assert set(runs) == {"Notes (sessions)", "Notes (chat_opener)", "Lifo"}, set(runs)
    assert runs["Notes (sessions)"]["target"] == "test_names:sessions"
    assert runs["Notes (chat_opener)"]["target"] == "notes:chat_opener"  # where the function is
    assert all(run["replica"] == "" for run in runs.values())
    text = result.stdout.str()
    (table_nonce,) = re.findall(r"Lifo: .*nonce (\w+)\)", text)
    replayed = set(re.findall(r"--storetest-nonce=(\w+)", text))
    assert replayed == {table_nonce} == {runs["Lifo"]["nonce"]}, (table_nonce, replayed)


HANG = "the factory did not return within 1 s while making the store"


def test_a_factory_past_the_deadline_is_said_once(tmp_path: Path, pytester: pytest.Pytester) -> None:
    (tmp_path / "notes.py").write_text(NOTES)
    done = _cli(tmp_path, "notes.py:hangs", "-k", ITEMS, "-q", "--call-timeout", "1")
    assert done.returncode == 1, done.stdout + done.stderr
    # The line before the table, and the table's row (wrapped): one whole line.
    assert [line for line in done.stdout.splitlines() if HANG in line and "it was cancelled" in line] == [
        line for line in done.stdout.splitlines() if line.startswith(HANG)], done.stdout
    assert len([line for line in done.stdout.splitlines() if line.startswith(HANG)]) == 1, done.stdout
    pytester.makepyfile(notes=NOTES, test_hangs="from notes import hangs\nfrom storetest import run_conformance\n"
                        "run_conformance(hangs)\n")
    result = pytester.runpytest("-p", "no:randomly", "-rN", "-k", ITEMS, "--storetest-call-timeout=1")
    result.assert_outcomes(failed=1)
    assert len([line for line in result.stdout.lines if line.startswith(HANG)]) == 1, result.stdout.str()


def _summary_counts(summary: str) -> tuple[int, int, int, dict[str, int]]:
    """(selected, of, deselected, {label: count}) from a summary line."""
    head, _, rest = summary.partition(": ")
    chosen = re.fullmatch(r"(\d+) of (\d+) clauses selected \((\d+) deselected\)", head)
    selected, total, deselected = (map(int, chosen.groups()) if chosen else
                                   (int(head.split()[0]), int(head.split()[0]), 0))
    parts = dict((label, int(n)) for n, label in re.findall(r"(\d+) ([a-z ]+?)(?:,|;|$)", rest))
    return selected, total, deselected, parts


def test_the_summary_counts_add_up() -> None:
    from reference_stores.memory import MemoryStore

    chosen = ["unknown_session_is_empty", "data_survives_idle", ITEMS, "log_append_order_is_kept"]
    report = storetest.check(MemoryStore, clauses=chosen, seed=1)
    assert report.summary() == (f"4 of {len(CLAUSES)} clauses selected ({len(CLAUSES) - 4} deselected): 1 passed, "
                                "0 failed, 1 skipped; 2 not claimed"), report.summary()
    for summary in (report.summary(), storetest.check(MemoryStore, seed=1).summary(),
                    summary_line({"passed": 3, "error": 1, "not claimed": 5}, 7, 2),
                    summary_line({"passed": 2, "interrupted": 1, "not claimed": 1}, 4, 0, "x")):
        selected, total, deselected, parts = _summary_counts(summary)
        assert sum(n for label, n in parts.items() if label != "x") == selected, summary
        assert selected + deselected == total, summary
    # Ctrl-C: the clauses with a verdict, of those and the one interrupted and those not reached.
    assert interrupted_line({"passed": 2, "skipped": 1, "interrupted": 1, "not claimed": 40}, 3) == (
        "interrupted after 3 of 7 claimed clauses")
    stopped = Report("x", "fast", 1, "n", (), not_run=("a", "b"), deselected=("a",))
    assert stopped.not_reached == ("b",) and stopped.selected() == 1


class Hung:
    """A plain item session whose ``get_items`` waits for ``release``."""

    release = threading.Event()

    def __init__(self, session_id: str) -> None:
        self.items: list[object] = []

    def get_items(self, limit: int | None = None) -> list[object]:
        Hung.release.wait(3600)
        return list(self.items)

    def add_items(self, items: list[object]) -> None:
        self.items.extend(items)

    def pop_item(self) -> object:
        return self.items.pop() if self.items else None

    def clear_session(self) -> None:
        self.items.clear()


@pytest.fixture
def released() -> Iterator[None]:
    Hung.release = threading.Event()
    try:
        yield
    finally:
        Hung.release.set()


def test_a_plain_item_sessions_stuck_call_is_abandoned_not_cancelled(released: None) -> None:
    report = storetest.check(item_sessions(lambda: Hung), clauses=[ITEMS], call_timeout=1, seed=1)
    (result,) = report.results
    assert result.outcome == "failed", str(report)
    assert result.diagnosis.startswith("get_items('st-"), result.diagnosis
    assert "abandoned, still running" in result.diagnosis and "cancelled" not in result.diagnosis, result.diagnosis
    assert report.name == "Hung"  # the session's class, not the binding's ItemHistory
    assert report.replica == ""  # the binding's own second handle is nobody's replica= line
