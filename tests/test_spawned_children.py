"""A spawned child that dies before storetest's code runs in it is the harness's error,
reported at once, not the store's failure after the two-minute wait for an answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_a_child_that_cannot_start_is_an_error_not_the_stores_failure() -> None:
    done = subprocess.run([sys.executable, "-"], input=_SCRIPT, capture_output=True, text=True, cwd=ROOT,
                          timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "error", result
    assert "exited with code 1 before it started" in result["diagnosis"], result
    assert "__main__" in result["diagnosis"], result
