"""Nothing written where the user did not ask: Hypothesis keeps its caches (Unicode
tables, constants read from source files) in storetest's own directory, under the
command and under pytest, never in ``.hypothesis/`` of the working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def _written(where: Path) -> list[str]:
    return sorted(str(p.relative_to(where)) for p in where.rglob("*"))


def test_the_command_writes_nothing_in_the_working_directory(tmp_path: Path) -> None:
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "-q", "-k", "round_trips_exactly"],
                          cwd=work, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _written(work) == []
    assert list((cache / "storetest" / "hypothesis").rglob("*")), "Hypothesis cached nothing: nothing was checked"
    # A strategy with codec="utf-8" makes a first run encode every code point to build
    # this table (seconds, and some 200 MB); storetest's texts never need it.
    assert not list(cache.rglob("codec-*")), "a strategy asked Hypothesis for a codec table"


def test_pytest_writes_no_hypothesis_directory(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = pytester.path.parent / f"{pytester.path.name}-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    pytester.makepyfile(test_memory="""
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore)
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "round_trips_exactly")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".hypothesis").exists()
    assert list((cache / "storetest" / "hypothesis").rglob("*"))
