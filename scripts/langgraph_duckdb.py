"""langgraph-checkpoint-duckdb's AsyncDuckDBSaver through storetest.check(), in an
environment of its own: it requires langgraph-checkpoint<3, below the pin the other
LangGraph savers need, so it is not in docs/ecosystem.md's table.

    tox -e langgraph-duckdb                   # a fresh env: storetest + langgraph-checkpoint-duckdb 2.0.2
    python scripts/langgraph_duckdb.py --seed 7

Prints every clause that failed or errored, with its first diagnosis, and the versions.
Exit status 1 when one did.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib.metadata import version
from typing import Any


def saver(tmp_path: Any) -> Any:
    from langgraph.checkpoint.duckdb.aio import AsyncDuckDBSaver

    return AsyncDuckDBSaver.from_conn_string(str(tmp_path / "checkpoints.duckdb"))


def main(argv: list[str] | None = None) -> int:
    from storetest import check, checkpointers

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(", ".join(f"{d} {version(d)}" for d in ("storetest", "langgraph-checkpoint", "langgraph-checkpoint-duckdb",
                                                   "duckdb")))
    started = time.monotonic()
    report = check(checkpointers(saver), seed=args.seed, profile="fast", name="AsyncDuckDBSaver")
    bad = [r for r in report.results if r.outcome in ("failed", "error")]
    for r in bad:
        print(f"{r.clause}: {r.outcome}: {' '.join((r.diagnosis or '').split())[:300]}")
    print(f"{len(bad)} of {sum(r.outcome != 'not claimed' for r in report.results)} clauses failed or errored "
          f"({time.monotonic() - started:.0f} s, seed {args.seed})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
