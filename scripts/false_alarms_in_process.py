"""Count false alarms of a few clauses over many seeds, in one process: every
``run_conformance`` of the reference stores' conformance files (tests/test_conformance_*.py)
run through ``storetest.check()`` with only the clauses named, seed after seed, on one
throwaway database per backend for the whole run (``tests.broken_stores.fixtures_outside_pytest``).

Where ``scripts/false_alarms.py`` starts pytest once per file and seed (a minute a run
on a loaded machine), this one pays the start-up once: it is the many-seed check for a
change that touched a few clauses.

    python scripts/false_alarms_in_process.py --runs 20 -k at_every_size -k related_ids
    python scripts/false_alarms_in_process.py --runs 20 --clause large_values_round_trip

Exit 1 when any clause failed on any seed (each failure is listed with its seed). A
factory that asks for a fixture the conformance file defines itself (MariaDB's schema
URL, mongomock's client) cannot run here and errors on every seed: run those files with
``scripts/false_alarms.py -k``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import storetest  # noqa: E402
from storetest import check  # noqa: E402
from storetest.clauses import CLAUSES  # noqa: E402
from tests.broken_stores import fixtures_outside_pytest  # noqa: E402


def _runs(files: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    """Every run_conformance call of ``files``: (file, its arguments)."""
    found: list[tuple[str, dict[str, Any]]] = []
    real = storetest.run_conformance

    def record(factory: Any, **kwargs: Any) -> None:
        found.append((current[0], {"factory": factory, **kwargs}))

    current = [""]
    storetest.run_conformance = record  # type: ignore[assignment]
    try:
        for path in files:
            current[0] = path.name
            try:
                importlib.import_module(f"tests.{path.stem}")
            except BaseException as exc:  # pytest.importorskip raises a BaseException subclass
                print(f"{path.name}: not run ({type(exc).__name__}: {exc})", flush=True)
    finally:
        storetest.run_conformance = real  # type: ignore[assignment]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="conformance files (default: every one)")
    parser.add_argument("--runs", type=int, default=20, help="seeds per store (default 20)")
    parser.add_argument("--seed-base", type=int, default=41000)
    parser.add_argument("-k", action="append", default=[], help="clauses whose name contains this (repeatable)")
    parser.add_argument("--clause", action="append", default=[], help="a clause by name (repeatable)")
    args = parser.parse_args(argv)
    files = args.files or sorted((ROOT / "tests").glob("test_conformance_*.py"))
    clauses = [c.name for c in CLAUSES if c.name in args.clause or any(k in c.name for k in args.k)]
    print(f"clauses: {', '.join(clauses)}", flush=True)
    failures = 0
    with fixtures_outside_pytest() as fixture:
        for file, run in _runs(files):
            name = run.get("name") or getattr(run["factory"], "__name__", "?")
            wanted = [c for c in clauses if c not in (run.get("skip") or {})]
            failed_seeds = 0
            started = time.monotonic()
            for seed in range(args.seed_base, args.seed_base + args.runs):
                try:
                    report = check(run["factory"], run.get("replica"), clauses=wanted, seed=seed, fixtures=fixture,
                                   name=name, reopen=run.get("reopen"))
                except Exception as exc:
                    print(f"  {file} {name} seed={seed}: error {type(exc).__name__}: {exc}", flush=True)
                    failed_seeds += 1
                    continue
                bad = [r for r in report.results if r.outcome in ("failed", "error")]
                for r in bad:
                    print(f"  {file} {name} seed={seed} {r.clause}: {r.outcome}: "
                          f"{(r.diagnosis or r.details or '').splitlines()[0][:300]}", flush=True)
                failed_seeds += bool(bad)
            ran = sorted({r.clause for r in report.results if r.outcome == "passed"}) if args.runs else []
            print(f"== {file} {name}: {failed_seeds}/{args.runs} seeds with a failure; {len(ran)} clause(s) "
                  f"passed on the last seed ({time.monotonic() - started:.0f}s)", flush=True)
            failures += failed_seeds
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
