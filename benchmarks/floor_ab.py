"""Two builds of the SQLite store's save side by side with the floor, in one run: the
reference stores of a git revision (``--before``, default ``HEAD``) against those of the
working tree, each saving its own file, the floor (one INSERT and its fsync, as in
``benchmarks/floor_rounds.py``) on a third, the three interleaved round by round.

    pip install "storetest[bench]"
    python benchmarks/floor_ab.py --rounds 1000 --runs 4
    python benchmarks/floor_ab.py --before 5cd3f91
    python benchmarks/floor_ab.py --company      # colder, nearer floor_rounds.py

A change worth 1 % of the floor ratio is 4-5 us at turn 2,000: less than one run of
``floor_rounds.py`` moves from another. Here both builds meet the same disk, load and
cache state in every round, so their per-round ratio (``after/before``) moves by about
0.3 % between runs. The revision's ``reference_stores`` is copied into a temp dir under
another package name (imports rewritten), so both builds load in this one process; the
rest (``storetest``) is the working tree's.

Alone, the three leave each other's code warmer than ``floor_rounds.py``'s seven
contenders do, so a cut of cold Python shows smaller here. ``--company`` interleaves the
peer's ``SQLiteSession.add_items`` and the floor on two connections with them (their
times not reported): five contenders, nearer ``floor_rounds.py``'s cold.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from common import load_average, sqlite_durability
from peers import TURNS, PeerSQLiteSession, PhysicalFloor, PhysicalFloorTwo, _conversation, empty_wals

from reference_stores.sqlite import _columns
from storetest.codec import encode_message
from storetest.contract import Message

ROOT = Path(__file__).resolve().parent.parent


def build_of(revision: str, parent: Path) -> ModuleType:
    """``reference_stores.sqlite`` as it is at ``revision``, as module ``reference_stores_before.sqlite``."""
    package = parent / "reference_stores_before"
    archive = subprocess.run(
        ["git", "archive", revision, "src/reference_stores"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(parent)], input=archive, check=True)
    shutil.move(parent / "src" / "reference_stores", package)
    for path in package.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        text = text.replace("from reference_stores.", "from reference_stores_before.")
        path.write_text(text.replace("import reference_stores.", "import reference_stores_before."), encoding="utf-8")
    sys.path.insert(0, str(parent))
    return importlib.import_module("reference_stores_before.sqlite")


async def one_run(
    builds: dict[str, ModuleType], rounds: int, directory: Path, company: bool = False
) -> dict[str, list[float]]:
    conv = _conversation("agent", TURNS + rounds + 2)
    transcripts: dict[str, list[Message]] = {}
    stores = {}
    for name, module in builds.items():
        store = module.SQLiteStore(directory / f"{name}.sqlite", synchronous="FULL")
        transcripts[name] = list(conv[: TURNS - 1])
        await asyncio.to_thread(store.save, "floor", transcripts[name])
        stores[name] = store
    made = builds["after"].SQLiteStore(directory / "floor.sqlite", synchronous="FULL")
    made.save("floor", conv[: TURNS - 1])
    made.close()
    rows = [(os.urandom(32), *_columns(m, encode_message(m))) for m in conv[TURNS - 1 : TURNS - 1 + rounds]]
    floor = PhysicalFloor(directory / "floor.sqlite", "FULL", rows)
    if company:
        made = builds["after"].SQLiteStore(directory / "floor-two.sqlite", synchronous="FULL")
        made.save("floor", conv[: TURNS - 1])
        made.close()
        floor_two = PhysicalFloorTwo(directory / "floor-two.sqlite", "FULL", rows)
        peer = PeerSQLiteSession(directory / "peer.sqlite", "FULL", TURNS + rounds + 2)
        await peer.setup("floor", TURNS - 1, handles=("a",))
    empty_wals(directory)  # as peers.run_floor does, and why
    for name, store in stores.items():
        got = sqlite_durability(store._conn)
        if got != "journal_mode=wal, synchronous=FULL":
            raise SystemExit(f"{name}: {got}")

    # As peers.run_floor: each round's bookkeeping (the agent's message added to its
    # transcript) before the clock, then one timed call handed to a thread.
    Round = Callable[[int], tuple[Callable[..., Any], tuple[Any, ...]]]

    def save_by(name: str) -> Round:
        store, transcript = stores[name], transcripts[name]

        def call(r: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
            transcript.append(conv[TURNS - 1 + r])
            return store.save, ("floor", transcript)

        return call

    calls: dict[str, Round] = {
        "before": save_by("before"),
        "after": save_by("after"),
        "floor": lambda r: (floor.turn, (r,)),
    }
    if company:
        calls["floor two"] = lambda r: (floor_two.turn, (r,))
        peer_handle, peer_items = peer._handle("floor", "a"), peer._items("floor")
    times: dict[str, list[float]] = {key: [] for key in [*calls, *(["peer"] if company else [])]}
    order = list(times)
    try:
        for r in range(rounds):
            turn = order[r % len(order) :] + order[: r % len(order)]
            if (r // len(order)) % 2:
                turn.reverse()
            for key in turn:
                if key == "peer":  # SQLiteSession's add_items is a coroutine of its own
                    items = [peer_items[TURNS + r - 1]]
                    start = time.perf_counter()
                    await peer_handle.add_items(items)
                else:
                    call, args = calls[key](r)
                    start = time.perf_counter()
                    await asyncio.to_thread(call, *args)
                times[key].append(time.perf_counter() - start)
    finally:
        for store in stores.values():
            store.close()
        floor.close()
        if company:
            floor_two.close()
            await peer.close()
    return times


def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--before", default="HEAD", help="git revision of the first build (default HEAD)")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--company", action="store_true",
                        help="interleave the peer's add_items and the floor on two connections too, not reported")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="floor-ab-") as tmp:
        before = build_of(args.before, Path(tmp))
        builds = {"before": before, "after": importlib.import_module("reference_stores.sqlite")}
        print(f"before: {args.before}; after: the working tree. Save at turn {TURNS:,}, {args.rounds} rounds a run, "
              f"durability read back: WAL, synchronous=FULL. {load_average()}.")
        print("\n| run | before / floor | after / floor | after / before | medians (us): before, after, floor |")
        print("|---|---|---|---|---|")
        for run in range(1, args.runs + 1):
            directory = Path(tmp) / f"run-{run}"
            directory.mkdir()
            times = asyncio.run(one_run(builds, args.rounds, directory, args.company))
            medians = ", ".join(f"{statistics.median(times[k]) * 1e6:.0f}" for k in ("before", "after", "floor"))
            print(f"| {run} | {ratio(times, 'before', 'floor'):.3f} | {ratio(times, 'after', 'floor'):.3f} | "
                  f"{ratio(times, 'after', 'before'):.3f} | {medians} |", flush=True)
        print(f"\n{load_average()} at the end.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
