"""Count the false alarms of one correct store, in this process: ``storetest.check()`` on
many seeds, every clause (the crash clauses too, with ``--reopen``), throwaway databases
shared by the runs. Faster than ``scripts/false_alarms.py`` (no interpreter and no
import per seed) for a binding whose SDK is slow to import.

    python scripts/false_alarms_of.py tests.llama_index_stores:sqlite_chat_store --reopen
    python scripts/false_alarms_of.py MODULE:ATTRIBUTE --runs 5 --seed-base 1
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storetest import check
from tests.broken_stores import fixtures_outside_pytest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="MODULE:ATTRIBUTE, the binding or factory")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=20240)
    parser.add_argument("--reopen", action="store_true", help="pass the target as reopen= (the crash clauses)")
    args = parser.parse_args(argv)
    module, _, name = args.target.partition(":")
    target = getattr(importlib.import_module(module), name)
    failed_runs = 0
    with fixtures_outside_pytest() as fixture:
        for seed in range(args.seed_base, args.seed_base + args.runs):
            started = time.monotonic()
            report = check(target, seed=seed, fixtures=fixture, reopen=target if args.reopen else None)
            bad = [r for r in report.results if r.outcome in ("failed", "error")]
            failed_runs += bool(bad)
            counts = {o: sum(r.outcome == o for r in report.results) for o in ("passed", "failed", "error", "skipped")}
            print(f"seed={seed} {'FAIL' if bad else 'ok'} ({time.monotonic() - started:.0f}s): {counts}", flush=True)
            for r in bad:
                print(f"    {r.clause}: {r.diagnosis.splitlines()[0] if r.diagnosis else r.outcome}", flush=True)
    print(f"== {args.target}: {failed_runs}/{args.runs} runs with a failure", flush=True)
    return 1 if failed_runs else 0


if __name__ == "__main__":
    raise SystemExit(main())
