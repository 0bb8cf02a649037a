"""How long a failing store waits for its report, against a passing one, per backend.

    python benchmarks/failing_speed.py              # every broken store, default profile
    python benchmarks/failing_speed.py --backend memory --backend sqlite

Each broken store in ``tests/broken_stores`` gets the whole suite (``storetest.check``
with every clause), and so does the reference store of its backend, in one run, the
reference store timed before and after the broken ones (and, with ``--adjacent``, right
before each); the table reports each broken store's wall time as a ratio of the
reference's median (with ``--adjacent``, of the reference run just before it). Throwaway PostgreSQL and
MariaDB databases come from ``storetest.databases``, in the fast mode the tests use
(every store of a backend on one server, so at one durability; SQLite stores at their
own settings): the figure is the suite's wall time, not a commit's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from common import load_average

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storetest import check, databases  # noqa: E402
from tests.broken_stores import fixtures_outside_pytest, registry  # noqa: E402


def _memory() -> Any:
    from reference_stores.memory import MemoryStore

    return MemoryStore()


def _sqlite(tmp_path: Path) -> Iterator[Any]:
    from reference_stores.sqlite import SQLiteStore

    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


async def _postgres(storetest_postgres_url: str) -> AsyncIterator[Any]:
    import asyncpg

    from reference_stores.postgres import SCHEMA, PostgresStore

    pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=8)
    try:
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)
        yield PostgresStore(pool)
    finally:
        await pool.close()


def _mysql(storetest_mysql_url: str) -> Any:
    from reference_stores.mysql import SCHEMA, MySQLStore

    conn = databases.mysql_connection(storetest_mysql_url)
    with conn.cursor() as cur:
        for statement in SCHEMA:
            cur.execute(statement)
    conn.commit()
    conn.close()
    return MySQLStore(lambda: databases.mysql_connection(storetest_mysql_url))


REFERENCES: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {
    "memory": (_memory, None),
    # The stores whose damage only an explanation names are memory stores too.
    "explained": (_memory, None),
    "sqlite": (_sqlite, _sqlite),
    "postgres": (_postgres, _postgres),
    "mysql": (_mysql, _mysql),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=sorted(REFERENCES),
                        help="only these backends (default: all)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--adjacent", action="store_true",
                        help="time the reference store again right before each broken store and divide by that "
                             "run (for a machine whose load changes during the run)")
    parser.add_argument("--store", action="append", help="only these broken stores (default: all of the backend)")
    args = parser.parse_args(argv)
    backends = args.backend or list(REFERENCES)
    with fixtures_outside_pytest() as fixture:

        def timed(factory: Callable[..., Any], replica: Callable[..., Any] | None) -> tuple[float, bool]:
            started = time.perf_counter()
            report = check(factory, replica, seed=args.seed, fixtures=fixture)
            return time.perf_counter() - started, report.ok

        print("| backend | store | seconds | x passing | verdict |")
        print("|---|---|---|---|---|")
        for backend in backends:
            reference, replica = REFERENCES[backend]
            timed(reference, replica)  # warm: the server, imports
            passing = [timed(reference, replica)[0]]
            broken = [b for b in registry() if b.backend == backend and (not args.store or b.name in args.store)]
            rows = []
            for b in broken:
                near = timed(reference, replica)[0] if args.adjacent else 0.0
                seconds, ok = timed(b.factory, b.replica)
                rows.append((b.name, seconds, ok, near))
            passing.append(timed(reference, replica)[0])
            base = statistics.median(passing + [near for *_, near in rows if near])
            print(f"| {backend} | reference (passing) | {base:.2f} | 1.00 | pass |")
            ratios = []
            for name, seconds, ok, near in rows:
                ratios.append(seconds / (near or base))
                print(f"| {backend} | {name} | {seconds:.2f} | {ratios[-1]:.2f} | "
                      f"{'pass (not caught!)' if ok else 'fail'} |", flush=True)
            if ratios:
                worst = max(ratios)
                print(f"| {backend} | median failing | | {statistics.median(ratios):.2f} | |")
                print(f"| {backend} | worst failing | | {worst:.2f} | |", flush=True)
    print(f"\nFast-mode throwaway servers, as the tests run. {load_average()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
