"""Run every broken LlamaIndex chat store (tests/broken_stores/llama_index*_variants.py)
against the clause meant for it on many seeds, and count the seeds that caught it.

    python scripts/llama_index_kills.py               # 20 seeds from 20240
    python scripts/llama_index_kills.py --runs 5 --seed-base 1

Prints one line per broken store, ``caught N/M``, and exits 1 when one was missed or
caught by the wrong diagnosis on any seed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.broken_stores import fixtures_outside_pytest, run_clause
from tests.broken_stores.llama_index_db_variants import BROKEN as DB
from tests.broken_stores.llama_index_variants import BROKEN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=20240)
    args = parser.parse_args(argv)
    seeds = [args.seed_base + i for i in range(args.runs)]
    bad = 0
    with fixtures_outside_pytest() as fixture:
        for broken in [*BROKEN, *DB]:
            caught, wrong = 0, []
            for seed in seeds:
                failure = run_clause(broken, fixture, seed)
                if failure is None:
                    continue
                first = failure.diagnosis.partition("\n")[0]
                if failure.clause == broken.clause and broken.diagnosis in first:
                    caught += 1
                else:
                    wrong.append(f"seed {seed}: {first}")
            bad += caught != len(seeds)
            print(f"{broken.name} ({broken.clause}): caught {caught}/{len(seeds)}", *wrong[:2], sep="\n  ")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
