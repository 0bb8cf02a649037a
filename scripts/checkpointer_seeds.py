"""False alarms of the checkpoint clauses on LangGraph's own savers, over many seeds,
in one process (a pytest run per seed costs more than the clauses on a loaded machine).

    python scripts/checkpointer_seeds.py                  # 20 seeds, every saver
    python scripts/checkpointer_seeds.py --seeds 5 --saver memory

Each saver runs every checkpoint clause but those its known defects fail (each with a
repro in tests/ecosystem/repros/langgraph/, listed in tests/ecosystem/langgraph.py) and,
for InMemorySaver, the process clause (its data is one process's memory); the savers
with their data in a file or a database are reopened for the crash clause. The optional
methods' clauses are "not claimed" where a saver does not override them (no alarm).
Besides LangGraph's savers: tests/checkpointers.py's FileSaver and MaintainedSaver, the
controls of the broken savers. Every failure left is a false alarm or a new defect;
each is printed with its seed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from storetest import check, databases
    from storetest.clauses import CLAUSES
    from tests.checkpointers import (
        file_checkpointer,
        maintained_checkpointer,
        memory_checkpointer,
        postgres_checkpointer,
        sqlite_checkpointer,
    )
    from tests.ecosystem.langgraph import DEFECTS, IN_ONE_PROCESS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=48000)
    savers = {"memory": ("InMemorySaver", memory_checkpointer, dict(IN_ONE_PROCESS), None),
              "sqlite": ("AsyncSqliteSaver (file)", sqlite_checkpointer, {}, sqlite_checkpointer),
              "postgres": ("AsyncPostgresSaver (psycopg)", postgres_checkpointer, {}, postgres_checkpointer),
              "file": ("FileSaver", file_checkpointer, {}, file_checkpointer),
              "maintained": ("MaintainedSaver", maintained_checkpointer, dict(IN_ONE_PROCESS), None)}
    parser.add_argument("--saver", action="append", choices=tuple(savers))
    args = parser.parse_args()
    names = [c.name for c in CLAUSES if "checkpoints" in c.needs]
    alarms = 0
    with databases.throwaway("postgres") as url:
        for key in args.saver or list(savers):
            label, binding, skip, reopen = savers[key]
            skip = {**skip, **{d.clause: d.repro for d in DEFECTS if d.contender == label}}
            clauses = [n for n in names if n not in skip]
            started = time.monotonic()
            for seed in range(args.seed_base, args.seed_base + args.seeds):
                report = check(binding, clauses=clauses, seed=seed, fixtures={"storetest_postgres_url": url},
                               reopen=reopen)
                for r in report.results:
                    if r.outcome not in ("passed", "not claimed") and not (r.outcome == "skipped" and reopen is None):
                        alarms += 1
                        print(f"{label} seed {seed}: {r.clause} {r.outcome}: {r.diagnosis.splitlines()[0][:300]}")
            print(f"{label}: {len(clauses)} clauses x {args.seeds} seeds, skipped {sorted(skip)}, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    print(f"{alarms} failure(s) in all")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
