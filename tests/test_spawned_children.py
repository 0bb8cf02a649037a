"""A spawned child that dies before storetest's code runs in it is the harness's error,
reported at once, not the store's failure after the two-minute wait for an answer; a
child's calls keep the run's deadline (forked, as by default, and spawned)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storetest import check, item_sessions
from tests.item_histories import SQLiteItemSession

ROOT = Path(__file__).resolve().parent.parent

# Read from stdin: a spawned child re-imports the parent's __main__ from its path, and
# '<stdin>' has none, so every child exits before it starts.
_SCRIPT = """
import json
from storetest import check
from tests.item_histories import sqlite_items
report = check(sqlite_items, clauses=["adds_from_processes_land_whole"], seed=1)
(result,) = report.results
print(json.dumps({"outcome": result.outcome, "diagnosis": result.diagnosis}))
"""


def _from_stdin(**env: str) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-"], input=_SCRIPT, capture_output=True, text=True, cwd=ROOT,
                          timeout=100, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_child_that_cannot_start_is_an_error_not_the_stores_failure() -> None:
    result = _from_stdin(STORETEST_CHILDREN="spawn")
    assert result["outcome"] == "error", result
    assert "exited with code 1 before it started" in result["diagnosis"], result
    assert "__main__" in result["diagnosis"], result


def test_forked_children_need_no_main_module() -> None:
    """Forked by the fork server, a child re-imports nothing: a script from stdin runs."""
    result = _from_stdin(STORETEST_CHILDREN="")
    assert result["outcome"] == "passed", result


class _SlowInChildren(SQLiteItemSession):
    """Correct, but each add in a child process takes 3 s."""

    async def add_items(self, items: list[Any]) -> None:
        if multiprocessing.parent_process() is not None:
            await asyncio.sleep(3)
        await super().add_items(items)


def _slow_in_children(tmp_path: Path) -> Any:
    return lambda session_id: _SlowInChildren(session_id, tmp_path / "items.db")


slow_in_children_items = item_sessions(_slow_in_children)


@pytest.mark.parametrize("children", ["fork", "spawn"])
def test_a_child_process_keeps_the_runs_call_deadline(children: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child's calls have the deadline the run was given (here 1 s), not the default
    60 s: a store that is slow only in another process is cut off where it would be here."""
    monkeypatch.setenv("STORETEST_CHILDREN", children)
    (result,) = check(slow_in_children_items, clauses=["adds_from_processes_land_whole"], seed=1,
                      call_timeout=1).results
    assert result.outcome != "passed", result
    assert re.search(r"in child process \d, add_items\(.*\) on the factory's store did not return within 1 s",
                     result.diagnosis), result
    assert "StuckCall" not in result.diagnosis and "Traceback" not in result.details, result
