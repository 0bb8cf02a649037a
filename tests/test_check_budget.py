"""scripts/check_budget.py's parts on small inputs: the measuring of one child (wall time,
its own peak RSS, exit code), the kill table of another checkout on a few quick stores and
seeds, and the report made of both. The full run (two default checks per side, 127 stores
on 20 seeds) is the script's own, not a test's."""

from __future__ import annotations

import importlib.util
import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "scripts" / "broken_stores_table.py"


@pytest.fixture(scope="module")
def budget() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_budget", ROOT / "scripts" / "check_budget.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_measure_gives_the_childs_wall_time_peak_rss_and_exit(budget: ModuleType, tmp_path: Path) -> None:
    """A child holding 300 MiB for 0.3 s: at least that long and that big; its output and
    exit code kept."""
    code = "import sys, time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); " \
           "time.sleep(0.3); print('done'); sys.exit(3)"
    run = budget.measure([sys.executable, "-c", code], cwd=tmp_path, env={})
    assert run.exit == 3
    assert run.output.strip() == "done"
    assert run.wall >= 0.3
    assert 300 <= run.peak_mb < 300 + _rss_mb() + 60, run.peak_mb


def test_measure_does_not_count_the_parents_peak(budget: ModuleType, tmp_path: Path) -> None:
    """After this process held 400 MiB and let it go, a child that allocates nothing peaks
    far below it: under vfork Linux would charge the parent's high-water mark to it."""
    big = bytearray(400 * 2**20)
    big[::4096] = b"x" * len(big[::4096])
    del big
    run = budget.measure([sys.executable, "-c", "pass"], cwd=tmp_path, env={})
    assert run.exit == 0
    # This process may be large already (an xdist worker late in a run): compare with
    # its own high-water mark, which the 400 MiB raised, not with a fixed size.
    high_water = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert run.peak_mb < _rss_mb() + 60 < high_water, (run.peak_mb, _rss_mb(), high_water)


def _rss_mb() -> float:
    """This process's RSS now, MiB (a forked child's floor)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_summary_line_is_the_checks_own(budget: ModuleType) -> None:
    output = "  [1/2] pass  a (0.1s)\n\nSQLiteStore: 2 passed (claims: steering; seed 1, nonce x)\n  pass a\n"
    assert budget.summary_line(output) == "SQLiteStore: 2 passed (claims: steering; seed 1, nonce x)"
    assert budget.summary_line("Traceback\nImportError: no\n") == "ImportError: no"


def _copy_of_this_checkout(into: Path) -> Path:
    for package in ("src", "tests"):
        shutil.copytree(ROOT / package, into / package, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def test_the_kill_table_runs_the_other_trees_stores_on_each_seed(tmp_path: Path) -> None:
    """--tree imports from the other checkout: there, memory-rstrip's expected diagnosis
    is changed so it never matches, and the JSON shows it missed on both seeds (with the
    clause and diagnosis seen) while the other two are caught on both."""
    tree = _copy_of_this_checkout(tmp_path / "tree")
    variants = tree / "tests" / "broken_stores" / "memory_variants.py"
    text = variants.read_text(encoding="utf-8")
    assert text.count('"trailing whitespace stripped"') == 1
    variants.write_text(text.replace('"trailing whitespace stripped"', '"no such diagnosis"'), encoding="utf-8")
    out = tmp_path / "kills.json"
    command = [sys.executable, str(TABLE), "--tree", str(tree), "--seeds", "2", "--seed-base", "40",
               "--json", str(out), "--only", "memory-nfc", "--only", "memory-rstrip", "--only", "memory-crlf"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert Path(data["storetest"]).is_relative_to(tree)
    assert data["seeds"] == [40, 41]
    rows = {row["name"]: row for row in data["rows"]}
    assert sorted(rows) == ["memory-crlf", "memory-nfc", "memory-rstrip"]
    for name in ("memory-nfc", "memory-crlf"):
        assert rows[name]["caught_seeds"] == [40, 41] and rows[name]["missed"] == [], rows[name]
    rstrip = rows["memory-rstrip"]
    assert rstrip["caught_seeds"] == [] and rstrip["intended"] == "transcript_round_trips_exactly"
    assert [m["seed"] for m in rstrip["missed"]] == [40, 41]
    assert {m["clause"] for m in rstrip["missed"]} == {"transcript_round_trips_exactly"}
    assert "trailing whitespace stripped" in rstrip["missed"][0]["diagnosis"]
    assert "caught 2/2 memory-nfc" in done.stdout and "caught 0/2 memory-rstrip" in done.stdout


def test_the_report_shows_timings_ratios_and_kills(budget: ModuleType) -> None:
    runs = {"before": [budget.Run(4.0, 100.0, 0, "S: 9 passed (claims: x)"), budget.Run(2.0, 100.0, 0, "")],
            "after": [budget.Run(2.0, 50.0, 0, "S: 9 passed (claims: x)"), budget.Run(1.0, 100.0, 1, "")]}

    def kills(caught: list[int], missed: list[int]) -> dict[str, object]:
        row = {"name": "memory-nfc", "intended": "c", "caught_seeds": caught,
               "missed": [{"seed": s, "clause": "", "diagnosis": "(not caught)"} for s in missed]}
        return {"rows": [row]}

    table = {"before": kills([1, 2], []), "after": kills([1], [2])}
    text = budget.render({"date": "today"}, runs, table, 2)
    assert "| before | 1 (first) | 4.00 | 100 | 0 | S: 9 passed (claims: x) |" in text
    assert "| run 1 | 0.50 | 0.50 |" in text and "| run 2 | 0.50 | 1.00 |" in text
    assert "caught on all 2 seeds: before 1/1, after 0/1" in text
    assert "| `memory-nfc` | `c` | 2/2 | 1/2 |" in text
    assert "- after `memory-nfc` seed 2: `-`: (not caught)" in text
    assert budget._failed(runs, table) == ["after run 2 exited 1", "after missed memory-nfc on 1 seed(s)"]


def test_more_second_runs_add_their_median(budget: ModuleType) -> None:
    def side(*walls: float) -> list[object]:
        return [budget.Run(w, 60.0, 0, "") for w in walls]

    runs = {"before": side(9.0, 4.0, 8.0, 6.0), "after": side(3.0, 2.0, 3.0, 9.0)}
    text = budget.render({"date": "today"}, runs, {"before": {"rows": []}, "after": {"rows": []}}, 2)
    assert "| run 4 | 1.50 | 1.00 |" in text
    assert "| median of runs 2-4 | 0.50 | 1.00 |" in text
    assert "Median of the second runs: before 6.00 s, 60 MiB, after 3.00 s, 60 MiB." in text
