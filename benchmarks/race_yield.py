"""What one traced line costs a race of plain calls, and how often the interpreter
changes threads there, with each way a racing thread can yield at a line of the store's
code: ``os.sched_yield()`` (storetest's) against ``time.sleep(0)`` (its way before).

    python benchmarks/race_yield.py                  # 2, 4 and 8 threads, 5 rounds
    python benchmarks/race_yield.py --rounds 9 --lines 20000

Each round starts ``N`` threads together at a ``threading.Barrier``; each runs a loop of
``--lines`` traced lines under ``storetest.races.preemptible`` at the race's switch
interval, once with each yield, in alternating order. It prints, per thread count, the
median microseconds per line of each yield, their ratio, and the share of loop turns
after which another thread's came next (1.0: a switch at every turn). What each yield catches
is ``scripts/race_rounds.py``'s to say (``--yield sleep`` for the old one); a ratio,
not a time, is this script's result: these machines are shared.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storetest import races


def _lines(n: int, log: list[int]) -> None:
    me = threading.get_ident()
    for _ in range(n):
        log.append(me)


def _round(threads: int, lines: int, yield_with: Callable[[], object]) -> tuple[float, float]:
    """Microseconds per traced line, and the share of loop turns followed by another thread's."""
    log: list[int] = []
    barrier = threading.Barrier(threads)

    def racer() -> None:
        barrier.wait()
        with races.preemptible([__file__]):
            _lines(lines, log)

    saved, races._yield_to_others = races._yield_to_others, yield_with
    previous = sys.getswitchinterval()
    sys.setswitchinterval(races.RACE_SWITCH_INTERVAL)
    try:
        workers = [threading.Thread(target=racer) for _ in range(threads)]
        began = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - began
    finally:
        sys.setswitchinterval(previous)
        races._yield_to_others = saved
    switches = sum(a != b for a, b in itertools.pairwise(log))
    # Two traced lines per loop turn (the ``for`` and the append).
    return elapsed / (2 * len(log)) * 1e6, switches / len(log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=5000, help="loop turns per thread and round")
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_yield"):
        print("os.sched_yield is missing here: storetest yields with time.sleep(0)")
        return 1
    ways = {"sched_yield": os.sched_yield, "sleep(0)": races._sleep_zero}
    print(f"{args.rounds} rounds of {args.lines} loop turns a thread, switch interval "
          f"{races.RACE_SWITCH_INTERVAL:g} s, {os.cpu_count()} CPUs")
    print("| threads | sched_yield, µs/line | sleep(0), µs/line | sched_yield / sleep(0) "
          "| switches/turn, sched_yield | switches/turn, sleep(0) |")
    print("|---|---|---|---|---|---|")
    for threads in (2, 4, 8):
        cost: dict[str, list[float]] = {w: [] for w in ways}
        switched: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(args.rounds):
            for name in (list(ways) if r % 2 == 0 else list(ways)[::-1]):
                micros, share = _round(threads, args.lines, ways[name])
                cost[name].append(micros)
                switched[name].append(share)
        new, old = (statistics.median(cost[w]) for w in ways)
        print(f"| {threads} | {new:.2f} | {old:.2f} | {new / old:.3f} | "
              f"{statistics.median(switched['sched_yield']):.3f} | {statistics.median(switched['sleep(0)']):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
