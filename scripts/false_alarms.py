"""Count false alarms: run the reference stores' conformance files many times, each
with its own ``--storetest-seed``, and count the clauses that failed.

A reference store is correct by construction, so every failure here is either a bug in
the reference store or a false alarm in the suite; both need looking at. Each failure
is listed with the command that reproduces it.

    python scripts/false_alarms.py                      # 20 runs of every tests/test_conformance_*.py
    python scripts/false_alarms.py --runs 5 tests/test_conformance_mysql.py
    python scripts/false_alarms.py --seed-base 1000 --timeout 300
    python scripts/false_alarms.py -k "at_every_size or related_ids"   # the clauses a change touched
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run_once(test_file: Path, seed: int, timeout: float, keyword: str = "") -> tuple[str, list[tuple[str, str, str]]]:
    """Run one conformance file with one seed: (summary, [(run, clause, diagnosis), ...])."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [
            sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider",
            f"--storetest-seed={seed}", f"--storetest-report={report}",
            *(["-k", keyword] if keyword else []),
        ]
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timed out", [("?", "?", f"no result within {timeout:.0f}s")]
        if not report.exists():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            return f"pytest exited {done.returncode}", [("?", "?", " | ".join(tail))]
        data = json.loads(report.read_text(encoding="utf-8"))
    failures = [
        (run["name"], clause["clause"], clause["diagnosis"])
        for run in data["runs"]
        for clause in run["results"]
        if clause["outcome"] in ("failed", "error")
    ]
    summary = "; ".join(f"{run['name']}: {run['summary']}" for run in data["runs"])
    return summary, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path,
                        help="conformance test files (default: tests/test_conformance_*.py)")
    parser.add_argument("--runs", type=int, default=20, help="runs per file (default 20)")
    parser.add_argument("--seed-base", type=int, default=20240,
                        help="run i uses seed SEED_BASE + i (default 20240)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    parser.add_argument("-k", dest="keyword", default="",
                        help="only the clauses pytest's -k selects (e.g. 'pop_item or clear_racing')")
    args = parser.parse_args(argv)
    files = args.files or sorted((ROOT / "tests").glob("test_conformance_*.py"))
    if not files:
        print("no tests/test_conformance_*.py files found")
        return 2
    print(f"files: {', '.join(str(f) for f in files)}")
    total_failed_runs = 0
    for test_file in files:
        failed_runs = 0
        failed_clauses = 0
        for i in range(args.runs):
            seed = args.seed_base + i
            started = time.monotonic()
            summary, failures = _run_once(test_file, seed, args.timeout, args.keyword)
            seconds = time.monotonic() - started
            mark = "FAIL" if failures else "ok"
            print(f"{test_file.name} seed={seed} {mark} ({seconds:.0f}s): {summary}", flush=True)
            for run, clause, diagnosis in failures:
                print(f"    {run} {clause}: {diagnosis}", flush=True)
                print(f"    reproduce: pytest {test_file} --storetest-seed={seed}", flush=True)
            failed_runs += bool(failures)
            failed_clauses += len(failures)
        print(f"== {test_file.name}: {failed_runs}/{args.runs} runs with a failure "
              f"({failed_clauses} failed clause(s))", flush=True)
        total_failed_runs += failed_runs
    return 1 if total_failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
