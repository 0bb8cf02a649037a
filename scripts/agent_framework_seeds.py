"""Run the one line on the correct Agent Framework history provider (tests/history_providers.py,
with reopen=) and the correct session store of tests/broken_stores on many seeds in one
process, through storetest.check, and count the clauses that failed (false alarms: both
stores are correct).

    python scripts/agent_framework_seeds.py               # seeds 1..20
    python scripts/agent_framework_seeds.py --seeds 5 --seed-base 100
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=1)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    warnings.simplefilter("ignore")
    from storetest import check, session_stores
    from tests.broken_stores.agent_framework_sessions_variants import memory_sessions
    from tests.history_providers import sqlite_history

    alarms = 0
    for seed in range(args.seed_base, args.seed_base + args.seeds):
        for name, binding, reopen in (("sqlite-history-provider", sqlite_history, sqlite_history),
                                      ("memory-session-store", session_stores(memory_sessions), None)):
            started = time.monotonic()
            report = check(binding, seed=seed, reopen=reopen, name=name)
            failed = [r for r in report.results if r.outcome in ("failed", "error")]
            alarms += len(failed)
            print(f"seed {seed} {name}: {report.count('passed')} passed, {len(failed)} failed "
                  f"({time.monotonic() - started:.0f} s)" + "".join(f"\n  {r.clause}: {r.diagnosis}" for r in failed),
                  flush=True)
    print(f"{alarms} false alarm(s) over {args.seeds} seeds")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
