"""`storetest check`, the main command, as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from storetest.clauses import CLAUSES

BROKEN_MODULE = '''
from reference_stores.memory import MemoryStore


class StripsTrailingSpace(MemoryStore):
    async def add_steer(self, session, text):
        await super().add_steer(session, text.rstrip() if isinstance(text, str) else text)


def make_store():
    return StripsTrailingSpace()


def make_replica(primary):
    return StripsTrailingSpace(primary.backend)
'''


def check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", *args],
        capture_output=True, text=True, cwd=cwd, timeout=600,
    )


def test_default_checks_sqlite_and_prints_the_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = check("--report", str(report), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    n = len(CLAUSES)
    claimed = len([c for c in CLAUSES if "log" not in c.needs])  # SQLite keeps no entry log
    assert f"sqlite: {n} clauses: {claimed} passed, 0 failed, {n - claimed} not claimed" in result.stdout
    data = json.loads(report.read_text())
    assert {row["outcome"] for row in data["runs"][0]["clauses"]} == {"passed", "not claimed"}


def test_a_broken_third_party_store_fails_with_its_diagnosis(tmp_path: Path) -> None:
    (tmp_path / "thirdparty.py").write_text(BROKEN_MODULE)
    report = tmp_path / "report.md"
    result = check("thirdparty:make_store", "--replica", "thirdparty:make_replica",
                   "--report", str(report), "-k", "in_order or isolated", cwd=tmp_path)
    assert result.returncode == 1
    assert "FAIL  steers_are_taken_in_order_exactly_once" in result.stdout
    assert "trailing whitespace stripped" in result.stdout
    assert "| `steers_are_taken_in_order_exactly_once` | FAIL |" in report.read_text()


def test_a_bad_target_is_explained(tmp_path: Path) -> None:
    result = check("no_such_module:factory", cwd=tmp_path)
    assert result.returncode != 0
    assert "cannot import 'no_such_module'" in result.stderr
    result = check("just_a_module", cwd=tmp_path)
    assert "is not of the form package.module:factory" in result.stderr
