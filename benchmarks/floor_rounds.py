"""The SQLite floor of ``benchmarks/peers.py`` alone, with each ratio also taken over
every 200 rounds (how it moves as the run goes on), beside our save's and the floor's
medians and what our save costs over the floor per 200 rounds, and what a commit's
sync costs on the disk under it: a block appended to a file and ``fdatasync``-ed (the
file grows, so its size is committed too) against a block overwritten and
``fdatasync``-ed.

    pip install "storetest[bench]"
    python benchmarks/floor_rounds.py --rounds 400 --rounds 1000     # one run each, in turn

Every figure comes with the load average; the floor's durability is read back by
``run_floor`` (WAL, ``synchronous=FULL``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import load_average
from peers import OLD_HARNESS, _paired, report_floor, run_floor

#: (whole, under it) pairs whose ratio is shown per 200 rounds.
PAIRS = [("ours one", "floor one"), ("ours one", "ours SQL"), ("ours SQL", "floor one"),
         ("peer add_items", "floor one")]
CHUNK = 200


def sync_costs(directory: str, blocks: int = 300) -> tuple[float, float]:
    """Median ms of (a block appended and synced, a block overwritten and synced)."""
    path = os.path.join(directory, "sync-probe.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    block = os.urandom(8192)
    grow: list[float] = []
    over: list[float] = []
    try:
        for times in (grow, over):
            for i in range(blocks):
                start = time.perf_counter()
                os.pwrite(fd, block, i * len(block))
                os.fdatasync(fd)
                times.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(grow), statistics.median(over)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, action="append", help="repeatable; default 400 then 1000")
    parser.add_argument("--old-harness", action="store_true",
                        help=f"also time our save as this benchmark once did ({OLD_HARNESS!r})")
    args = parser.parse_args(argv)
    for rounds in args.rounds or [400, 1000]:
        with tempfile.TemporaryDirectory(prefix="floor-rounds-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
            result = asyncio.run(run_floor(Path(tmp), "FULL", rounds, old_harness=args.old_harness))
            grow, over = sync_costs(tmp)
        print(report_floor("FULL", result, rounds, load_average()))
        times = result["times"]
        print()
        for a, b in PAIRS:
            chunks = [
                statistics.median(x / y for x, y in zip(times[a][s : s + CHUNK], times[b][s : s + CHUNK], strict=True))
                for s in range(0, rounds, CHUNK)
            ]
            print(f"{a} / {b}, per {CHUNK} rounds: " + " ".join(f"{c:.2f}" for c in chunks))
        for key in ("ours one", "floor one"):
            print(f"{key}, median ms per {CHUNK} rounds: " + " ".join(
                f"{statistics.median(times[key][s : s + CHUNK]):.3f}" for s in range(0, rounds, CHUNK)))
        # What our save costs over the floor in each round, in microseconds: flat while
        # the ratio moves means the floor's own time (its sync) moved.
        gaps = [(x - y) * 1000 for x, y in zip(times["ours one"], times["floor one"], strict=True)]
        print(f"ours one - floor one, median us per {CHUNK} rounds: " + " ".join(
            f"{statistics.median(gaps[s : s + CHUNK]):.0f}" for s in range(0, rounds, CHUNK)))
        if OLD_HARNESS in times:
            # The same save, timed with the agent's bookkeeping and a coroutine more.
            extra = statistics.median(
                (x - y) * 1000 for x, y in zip(times[OLD_HARNESS], times["ours one"], strict=True))
            print(f"{OLD_HARNESS} / floor one: {_paired(times, OLD_HARNESS, 'floor one')}; "
                  f"{OLD_HARNESS} - ours one: median {extra:.1f} us")
        print(f"a block appended and fdatasync-ed: {grow:.3f} ms; overwritten and fdatasync-ed: {over:.3f} ms "
              f"(medians of 300, the same directory)\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
