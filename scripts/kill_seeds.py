"""Run broken stores against their intended clause on many seeds, in the profile each
is registered with (``fast`` unless it says), and print how many seeds caught each with
the intended diagnosis on its first line: the 20-of-20 figure of the racy stores, out of
the test command.

    python scripts/kill_seeds.py                          # every racy store, 20 seeds
    python scripts/kill_seeds.py --all --seeds 20         # every broken store
    python scripts/kill_seeds.py --only items-pop --only clear --seed-base 5000

The throwaway PostgreSQL, MariaDB and Redis databases are started once for the run.
Exit 1 when a store was missed (or wrongly diagnosed) on any seed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=1)
    parser.add_argument("--all", action="store_true", help="every broken store, not only the racy ones")
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                        help="only stores whose name contains it (repeatable)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.broken_stores import fixtures_outside_pytest, registry, run_clause

    chosen = [b for b in registry() if (args.all or b.racy) and b.backend != "crash"
              and (not args.only or any(o in b.name for o in args.only))]
    missed_any = False
    with fixtures_outside_pytest() as fixture:
        for broken in chosen:
            began, caught, missed = time.perf_counter(), 0, []
            for seed in range(args.seed_base, args.seed_base + args.seeds):
                failure = run_clause(broken, fixture, seed)
                if (failure is not None and failure.clause == broken.clause
                        and broken.diagnosis in failure.diagnosis.partition("\n")[0]):
                    caught += 1
                else:
                    missed.append(seed)
            missed_any |= bool(missed)
            print(f"{broken.name:44} {broken.clause:48} {caught}/{args.seeds}  "
                  f"{time.perf_counter() - began:.1f} s" + (f"  missed seeds {missed}" if missed else ""),
                  flush=True)
    return 1 if missed_any else 0


if __name__ == "__main__":
    sys.exit(main())
