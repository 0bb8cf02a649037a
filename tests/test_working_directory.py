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


def test_hypothesis_draws_no_literals_from_storetests_own_source(tmp_path: Path) -> None:
    # Hypothesis draws literals from the source of "local" modules (outside site-packages)
    # and caches each module's under constants/, its path on the first line. From this
    # checkout storetest and reference_stores are local; installed, they are not. They
    # are never read now: a check draws the same from both, and a default check from a
    # checkout no longer filters ~1,700 of storetest's literals at every new draw shape.
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "-q", "-k", "round_trips_exactly"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stdout + done.stderr
    read = [p.read_text(encoding="utf-8").partition("\n")[0]
            for p in (cache / "storetest" / "hypothesis").rglob("constants/*")]
    own = [line for line in read if f"{os.sep}storetest{os.sep}" in line or f"{os.sep}reference_stores{os.sep}" in line]
    assert not own, own


def test_only_storetests_own_files_change_what_hypothesis_takes_for_local() -> None:
    # The standard library is settled without resolving its paths; everything else is
    # Hypothesis's own answer.
    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import is_local_module_file

    import storetest.clauses  # noqa: F401 (puts the check in place)

    checked = 0
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str):
            continue
        ours = name.split(".")[0] in ("storetest", "reference_stores")
        assert providers.is_local_module_file(path) is (False if ours else is_local_module_file(path)), name
        checked += 1
    assert checked > 100
    assert providers.is_local_module_file(str(ROOT / "benchmarks" / "vs_langgraph.py"))
