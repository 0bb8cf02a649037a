"""Crash tests for the file-backed stores, through the crash clauses
(:mod:`storetest.clauses.crash`): ``STORETEST_LOG_KILLS`` lives (default 30;
docs/crash-clauses.md's figures are of 200) per store of a child process writing
through it, each killed by SIGKILL at a random moment inside a chosen call or, half
the time, by the kernel at a random byte of a write (``RLIMIT_FSIZE``); after every
death the data is reopened and must hold every acknowledged write, none in part, and
take the next write.

The stores: the JSONL log store with and without ``fsync``, the SQLite log store, and
the SQLite transcript store (saves, and steers added and taken). The conformance runs
(``tests/test_conformance_*.py``) run the same clauses with the profile's few dozen
kills; this file runs them long enough for docs/crash-clauses.md's figures, which it prints
(``pytest -s`` or ``-rP`` shows them)::

    PYTHONPATH=. pytest -rP tests/test_crash_log_stores.py
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reference_stores.jsonl_log import JsonlLogStore
from reference_stores.sqlite import SQLiteStore
from reference_stores.sqlite_log import SQLiteLogStore
from storetest import check
from storetest._engine.profiles import PROFILES

KILLS = int(os.environ.get("STORETEST_LOG_KILLS", "30"))
#: Kept for tests/test_crash_redis.py, which builds its entries from the same time.
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def jsonl_fsync(tmp_path: Path) -> JsonlLogStore:
    return JsonlLogStore(tmp_path / "sessions")


def jsonl_no_fsync(tmp_path: Path) -> JsonlLogStore:
    return JsonlLogStore(tmp_path / "sessions", fsync=False)


def sqlite_log(tmp_path: Path) -> Iterator[SQLiteLogStore]:
    with SQLiteLogStore(tmp_path / "logs.db") as store:
        yield store


def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


CASES: list[tuple[str, Callable[..., Any], str]] = [
    ("jsonl (fsync)", jsonl_fsync, "log_appends_survive_a_crash"),
    ("jsonl (no fsync)", jsonl_no_fsync, "log_appends_survive_a_crash"),
    ("sqlite log", sqlite_log, "log_appends_survive_a_crash"),
    ("sqlite transcripts", sqlite_store, "saves_survive_a_crash"),
    ("sqlite steers", sqlite_store, "steers_survive_a_crash"),
]


@pytest.mark.parametrize(("name", "factory", "clause"), CASES, ids=[c[0] for c in CASES])
def test_killed_writers_leave_whole_data(name: str, factory: Callable[..., Any], clause: str) -> None:
    """Every life's data reopened: each acknowledged write there, none in part, the next write works."""
    profile = dataclasses.replace(PROFILES["fast"], crash_kills=KILLS, crash_seconds=900.0)
    report = check(factory, clauses=[clause], reopen=factory, profile=profile, seed=13)
    (result,) = report.results
    sys.stdout.write(f"\nkilled {name}: {result.diagnosis or result.details}\n")
    assert result.outcome == "passed", result.details
    assert result.diagnosis.startswith(f"{KILLS} kills"), result.diagnosis
