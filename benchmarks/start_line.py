"""How long the race's start line takes to let its threads go once the last one has
arrived, with the waiting threads spinning as storetest's do (handing the interpreter
on at every turn, ``storetest._engine.races._pass_on``) and as they did before
(keeping it until the switch interval ran out).

    python benchmarks/start_line.py                  # 8 threads, 200 starts each way
    python benchmarks/start_line.py --threads 4 --starts 500

Each start makes a ``StartLine`` for ``--threads`` threads, starts them, and times the
last arrival to the moment the last one leaves the line (all awake, each let go), at
the race's switch interval; the two ways alternate start by start. It prints the median
and 90th percentile milliseconds of each way and the ratio of the medians, with the
load average: ratios, not times, are its result (these machines are shared).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import load_average

from storetest._engine import races


class _Timed(races.StartLine):
    """A start line that notes when its last thread arrived and when the last woke."""

    def __init__(self, parties: int) -> None:
        super().__init__(parties)
        self.last_arrival = 0.0
        self.all_awake = 0.0
        self.everyone_here.set = self._everyone_here  # type: ignore[method-assign]

    def _everyone_here(self) -> None:
        self.last_arrival = time.perf_counter()
        threading.Event.set(self.everyone_here)

    def wait(self) -> None:
        super().wait()
        with self.lock:
            self.all_awake = max(self.all_awake, time.perf_counter())


def _start(threads: int, spin: str) -> float:
    """Milliseconds from the last arrival to the last racer leaving the line."""
    line = _Timed(threads)
    kept = spin == "kept"
    if kept:  # the spin before: nothing handed on, the interval alone switches threads
        races._pass_on = lambda: None  # type: ignore[assignment]
    try:
        racers = [threading.Thread(target=line.wait) for _ in range(threads)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
    finally:
        races._pass_on = _PASS_ON
    return (line.all_awake - line.last_arrival) * 1000


_PASS_ON = races._pass_on


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--starts", type=int, default=200)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"handed on": [], "kept": []}
    previous = sys.getswitchinterval()
    sys.setswitchinterval(races.RACE_SWITCH_INTERVAL)
    print(f"== the start line of {args.threads} threads, {args.starts} starts each way ({load_average()})")
    try:
        for n in range(args.starts):
            for spin in (("handed on", "kept") if n % 2 == 0 else ("kept", "handed on")):
                races._race_starts()
                times[spin].append(_start(args.threads, spin))
    finally:
        sys.setswitchinterval(previous)
    for spin, ms in times.items():
        print(f"{spin:10s} median {statistics.median(ms):6.2f} ms   90th percentile "
              f"{statistics.quantiles(ms, n=10)[-1]:6.2f} ms")
    ratio = statistics.median(times["kept"]) / statistics.median(times["handed on"])
    print(f"kept / handed on: {ratio:.1f}x (medians); load after: {load_average()}")


if __name__ == "__main__":
    main()
