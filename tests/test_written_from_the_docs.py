"""A store written from README.md and docs/ (contract.md, options.md) alone (examples/json_file_store.py)
passes every clause, replicas included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import storetest
import storetest.clauses
from examples.json_file_store import make_replica, make_store
from tests.capabilities import OTHER_PROTOCOLS

ROOT = Path(__file__).resolve().parent.parent


def test_a_store_written_from_the_docs_passes() -> None:
    report = storetest.check(make_store, make_replica, name="json_file_store")
    assert report.ok, str(report)
    # It keeps transcripts and steers, not an entry log, an item history nor an ADK service: not claimed.
    log_clauses = sum(bool(c.needs & OTHER_PROTOCOLS) for c in storetest.clauses.CLAUSES)
    # opt-in, skipped without idle= or reopen=
    idle_clauses = sum(c.idle or c.reopen for c in storetest.clauses.CLAUSES
                       if not c.needs & OTHER_PROTOCOLS)
    assert report.count("passed") == len(report.results) - log_clauses - idle_clauses
    assert report.count("not claimed") == log_clauses


def test_the_command_in_its_docstring_runs_it() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", "examples.json_file_store:make_store", "--replica",
         "examples.json_file_store:make_replica", "-k", "replicas_share,unknown", "-q"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clauses selected (" in done.stdout and "deselected): 2 passed, 0 failed" in done.stdout, done.stdout
