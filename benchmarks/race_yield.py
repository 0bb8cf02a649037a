"""What one traced line costs a race of plain calls, and how often the interpreter
changes threads there, with each way a racing thread can yield at a line of the store's
code: storetest's (``os.sched_yield()``, then ``time.sleep(0)`` for the rest of a race
once eight of its yields, and a quarter of them, were slow), ``sched_yield`` alone, and
``sleep(0)`` alone (its way before).

    python benchmarks/race_yield.py                  # idle, then with every CPU busy
    python benchmarks/race_yield.py --rounds 9 --lines 20000

Each round starts ``N`` threads together at the race's start line; each runs a loop of
``--lines`` traced lines under ``storetest._engine.races.preemptible`` at the race's switch
interval, once with each yield, in rotating order. It prints, per thread count, the
median microseconds per line of each yield, their ratios to ``sleep(0)``, and the share
of loop turns after which another thread's came next (1.0: a switch at every turn).
Then it does the same with one busy loop per CPU running beside it, in processes of
their own, as on a shared CI machine. What each yield catches is
``scripts/race_rounds.py``'s to say (``--yield sleep`` for the old one); ratios, not
times, are this script's result: these machines are shared.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storetest._engine import races

_WAYS: dict[str, Callable[[], object]] = {
    "storetest": races._yield_to_others,
    "sched_yield": os.sched_yield if hasattr(os, "sched_yield") else races._sleep_zero,
    "sleep(0)": races._sleep_zero,
}


def _lines(n: int, log: list[int]) -> None:
    me = threading.get_ident()
    for _ in range(n):
        log.append(me)


def _round(threads: int, lines: int, yield_with: Callable[[], object]) -> tuple[float, float]:
    """Microseconds per traced line, and the share of loop turns followed by another thread's."""
    log: list[int] = []
    line = races.StartLine(threads)

    def racer() -> None:
        line.wait()
        with races.preemptible([__file__]):
            _lines(lines, log)

    saved, races._yield_to_others = races._yield_to_others, yield_with  # type: ignore[assignment]
    races._race_starts()
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
        races._yield_to_others = saved  # type: ignore[assignment]
    switches = sum(a != b for a, b in itertools.pairwise(log))
    # Two traced lines per loop turn (the ``for`` and the append).
    return elapsed / (2 * len(log)) * 1e6, switches / len(log)


@contextmanager
def _busy(processes: int) -> Iterator[None]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)]
    try:
        time.sleep(0.5)
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _table(rounds: int, lines: int) -> None:
    names = list(_WAYS)
    print("| threads | " + " | ".join(f"{n}, µs/line" for n in names) + " | storetest / sleep(0) "
          "| sched_yield / sleep(0) | " + " | ".join(f"switches/turn, {n}" for n in names) + " |")
    print("|---" * (2 * len(names) + 3) + "|")
    for threads in (2, 4, 8):
        cost: dict[str, list[float]] = {n: [] for n in names}
        switched: dict[str, list[float]] = {n: [] for n in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                micros, share = _round(threads, lines, _WAYS[name])
                cost[name].append(micros)
                switched[name].append(share)
        median = {n: statistics.median(cost[n]) for n in names}
        print(f"| {threads} | " + " | ".join(f"{median[n]:.2f}" for n in names)
              + f" | {median['storetest'] / median['sleep(0)']:.3f}"
              + f" | {median['sched_yield'] / median['sleep(0)']:.3f} | "
              + " | ".join(f"{statistics.median(switched[n]):.3f}" for n in names) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lines", type=int, default=5000, help="loop turns per thread and round")
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_yield"):
        print("os.sched_yield is missing here: storetest yields with time.sleep(0)")
        return 1
    cpus = os.cpu_count() or 1
    print(f"{args.rounds} rounds of {args.lines} loop turns a thread, switch interval "
          f"{races.RACE_SWITCH_INTERVAL:g} s, {cpus} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    print("idle:\n")
    _table(args.rounds, args.lines)
    print(f"\nwith {cpus} busy loops beside it:\n")
    with _busy(cpus):
        _table(args.rounds, max(1, args.lines // 10))
    return 0


if __name__ == "__main__":
    sys.exit(main())
