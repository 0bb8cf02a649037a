"""Why ``storetest check`` runs the races alone (``storetest._engine.workers``): the
default check's race clauses on the SQLite reference store, timed with nothing else
running and with one busy process beside them, as the other process of a shared run
would be on a 2-CPU machine.

    python benchmarks/race_beside.py                 # 5 rounds
    python benchmarks/race_beside.py --rounds 9

Each round runs ``storetest.check`` on the race clauses (those with ``races=True`` the
SQLite store claims) twice, in turn alone and beside a process spinning a Python loop,
the order alternating round by round, and takes each clause's seconds from the report.
It prints, per clause, the median seconds each way and the median of the rounds' ratios
(beside / alone), with the load average. Ratios, not times, are its result: these
machines are shared.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import load_average

from reference_stores.sqlite import SQLiteStore
from storetest import check
from storetest.clauses import CLAUSES

RACES = [c.name for c in CLAUSES if c.races and c.needs <= {"transcript", "steers"}]


def _sqlite(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


def _spin(stop: Any) -> None:
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x += i


@contextmanager
def _busy_beside() -> Iterator[None]:
    """A process spinning until the block ends (started before it, so it is running)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=_spin, args=(stop,), daemon=True)
    process.start()
    time.sleep(0.2)
    try:
        yield
    finally:
        stop.set()
        process.join()


def _seconds(seed: int) -> dict[str, float]:
    report = check(_sqlite, _sqlite, clauses=RACES, seed=seed)
    failed = [r.clause for r in report.results if r.outcome != "passed"]
    if failed:
        raise SystemExit(f"race clauses did not pass: {failed}")
    return {r.clause: r.seconds for r in report.results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory():
        alone: dict[str, list[float]] = {c: [] for c in RACES}
        beside: dict[str, list[float]] = {c: [] for c in RACES}
        print(f"== the race clauses alone and beside a busy process ({args.rounds} rounds; {load_average()})")
        for r in range(args.rounds):
            for way in (("alone", "beside") if r % 2 == 0 else ("beside", "alone")):
                if way == "alone":
                    got = _seconds(seed=r)
                else:
                    with _busy_beside():
                        got = _seconds(seed=r)
                for clause, seconds in got.items():
                    (alone if way == "alone" else beside)[clause].append(seconds)
        print(f"{'clause':55s} {'alone s':>8s} {'beside s':>9s} {'beside/alone':>13s}")
        for clause in RACES:
            ratios = [b / a for a, b in zip(alone[clause], beside[clause], strict=True) if a]
            print(f"{clause:55s} {statistics.median(alone[clause]):8.3f} {statistics.median(beside[clause]):9.3f} "
                  f"{statistics.median(ratios):12.2f}x")
        total_alone = [sum(v[i] for v in alone.values()) for i in range(args.rounds)]
        total_beside = [sum(v[i] for v in beside.values()) for i in range(args.rounds)]
        ratios = [b / a for a, b in zip(total_alone, total_beside, strict=True)]
        print(f"{'all of them':55s} {statistics.median(total_alone):8.3f} {statistics.median(total_beside):9.3f} "
              f"{statistics.median(ratios):12.2f}x")
        print(f"load after: {load_average()}")


if __name__ == "__main__":
    main()
