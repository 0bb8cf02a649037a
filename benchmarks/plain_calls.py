"""What the harness adds to a plain store's call outside a race: ``Target.run`` of the
call on the clause's own thread (``Watch.supervise``: finished there, without a task
or a turn of the event loop, what clauses do) against the round trip through the
loop to a pool thread and back (a task, ``asyncio.to_thread`` under
``asyncio.timeout``: what a racing call makes, and what every plain call made before
clauses ran on their own thread).

    python benchmarks/plain_calls.py                 # 10 interleaved rounds
    python benchmarks/plain_calls.py --rounds 20 --calls 500

Each round runs ``--calls`` pairs of ``add_steer`` and ``messages`` on the SQLite
reference store (``synchronous=FULL``, a temporary file) through the ``Target`` that
clauses get, once each way, in alternating order; it prints the median milliseconds per
call of each way, the store's own (called directly, in the same rounds) and the ratio
of the two ways. A ratio, not a time, is the result: these machines are shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference_stores.sqlite import SQLiteStore
from storetest._engine.harness import open_target
from storetest._engine.profiles import PROFILES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300, help="pairs of calls per way and round")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory, open_target(
        "plain_calls", lambda: SQLiteStore(Path(directory) / "calls.db"), None, {}, PROFILES["fast"], 1, "bench"
    ) as t:
        store = t.store.raw
        assert isinstance(store, SQLiteStore)
        per_call: dict[str, list[float]] = {"clause's thread": [], "through the loop": [], "direct": []}

        def calls(session: str) -> None:
            for i in range(args.calls):
                t.run(t.store.add_steer(session, f"steer {i}"))
                t.run(t.store.messages(session))

        def through(way: str, session: str) -> None:
            if way == "direct":
                for i in range(args.calls):
                    store.add_steer(session, f"steer {i}")
                    store.messages(session)
            elif way == "through the loop":
                calls(session)  # outside a clause's thread: a task, and the call on a pool thread
            else:
                t.watch.supervise(lambda: calls(session))

        for round_ in range(args.rounds):
            ways = list(per_call) if round_ % 2 == 0 else list(reversed(per_call))
            for way in ways:
                began = time.perf_counter()
                through(way, f"{way}-{round_}")
                per_call[way].append((time.perf_counter() - began) / (2 * args.calls) * 1000)
        store.close()
    medians = {way: statistics.median(ms) for way, ms in per_call.items()}
    print(f"{args.rounds} rounds of {args.calls} add_steer + messages pairs, load {os.getloadavg()[0]:.2f}")
    for way, ms in medians.items():
        print(f"  {way:17} {ms:.3f} ms per call (median of the rounds)")
    here, loop_ = medians["clause's thread"], medians["through the loop"]
    print(f"  clause's thread / through the loop: {here / loop_:.2f} of the call, "
          f"{(here - medians['direct']) / (loop_ - medians['direct']):.2f} of what the harness adds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
