"""How often one round of its race catches each racy broken store: the figure that sets
how many rounds a profile needs (``Profile.race_rounds``).

    python scripts/race_rounds.py                       # 60 seeds, every racy store
    python scripts/race_rounds.py --seeds 100 --only sqlite- --only postgres-
    python scripts/race_rounds.py --switch-interval 1e-6   # the race's old interval
    python scripts/race_rounds.py --yield sleep            # the old yield, time.sleep(0)

Each racy store in ``tests/broken_stores`` (but the crash clauses', which kill processes
rather than race rounds) runs against its intended clause with ``race_rounds=1`` on
seeds 1000.., through ``storetest.check``; a line per store gives the seeds on which
that one round caught it (three rounds for ``clear_racing_add_lands_before_or_after``,
which runs three times the profile's), and the seconds. With a per-round rate ``p``, ``r`` rounds
miss a store on a seed with probability ``(1 - p) ** r``. The throwaway PostgreSQL,
MariaDB and Redis databases are started once for the whole run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=60)
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                        help="only stores whose name contains it (repeatable)")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="seconds; the race's thread switch interval instead of storetest's")
    parser.add_argument("--yield", dest="yield_with", choices=("storetest", "sleep"), default="storetest",
                        help="how a racing thread yields at each line of the store's code: storetest's "
                             "way, or time.sleep(0) alone (its way before sched_yield)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from storetest._engine import races
    from storetest._engine.profiles import PROFILES
    from tests.broken_stores import fixtures_outside_pytest, registry, run_clause

    if args.switch_interval is not None:
        races.RACE_SWITCH_INTERVAL = args.switch_interval  # type: ignore[misc]
    if args.yield_with == "sleep":
        races._yield_to_others = races._sleep_zero
    one_round = dataclasses.replace(PROFILES["fast"], race_rounds=1)
    chosen = [b for b in registry() if b.racy and b.backend != "crash"
              and (not args.only or any(o in b.name for o in args.only))]
    how = "sleep(0)" if args.yield_with == "sleep" else "storetest's (sched_yield; sleep(0) when busy)"
    print(f"one round, {args.seeds} seeds, switch interval {races.RACE_SWITCH_INTERVAL:g} s, "
          f"yield {how}", flush=True)
    with fixtures_outside_pytest() as fixture:
        for broken in chosen:
            began, caught = time.perf_counter(), 0
            for seed in range(1000, 1000 + args.seeds):
                failure = run_clause(broken, fixture, seed, profile=one_round)  # type: ignore[arg-type]
                caught += failure is not None and failure.clause == broken.clause
            print(f"{broken.name:40} {broken.clause:50} {caught}/{args.seeds}  "
                  f"{time.perf_counter() - began:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
