"""How long a failing store waits for its report, against a passing one, per backend.

    python benchmarks/failing_speed.py              # every broken store, default profile
    python benchmarks/failing_speed.py --backend memory --backend sqlite

Each broken store in ``tests/broken_stores`` gets the whole suite (``storetest.check``
with every clause), and so does a correct store *of its own kind* (see
:func:`reference`): the same protocol (transcript store, plain threaded store, item
history, chat history), on the same backend, made the same way, with a replica exactly
when the broken store has one, so both run the same clauses and only the store's bug
differs. Each reference is timed before and after the broken stores (and, with
``--adjacent``, right before each); the table reports each broken store's wall time as
a ratio of its reference's median (with ``--adjacent``, of its reference run just
before it; with ``--repeat N``, the median of N such pairs). Clauses the correct store
itself fails are left out of both runs and named (an in-memory item history is not
shared by the process clause's children).
Throwaway PostgreSQL and MariaDB databases come from
``storetest.databases``, in the fast mode the tests use (every store of a backend on
one server, so at one durability; SQLite stores at their own settings): the figure is
the suite's wall time, not a commit's.
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

from storetest import chat_histories, check, item_sessions  # noqa: E402
from storetest.bindings.langchain import ChatHistories  # noqa: E402
from storetest.bindings.openai_agents import ItemSessions  # noqa: E402
from tests.broken_stores import BrokenStore, fixtures_outside_pytest, registry  # noqa: E402

BACKENDS = ("memory", "explained", "sqlite", "postgres", "mysql")

Factory = Callable[..., Any]


def _memory() -> Any:
    from reference_stores.memory import MemoryStore

    return MemoryStore()


def _memory_replica(primary: Any) -> Any:
    return primary.replica()


def _plain_memory() -> Any:
    from tests.broken_stores.memory_variants import PlainMemoryStore

    return PlainMemoryStore()


def _sqlite(tmp_path: Path) -> Iterator[Any]:
    from reference_stores.sqlite import SQLiteStore

    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


async def _postgres(storetest_postgres_url: str) -> AsyncIterator[Any]:
    # A fresh schema of its own, as each broken PostgreSQL store gets.
    from reference_stores.postgres import SCHEMA, PostgresStore
    from tests.broken_stores.postgres_variants import _in_fresh_schema

    async for store in _in_fresh_schema(storetest_postgres_url, SCHEMA, PostgresStore):
        yield store


def _mysql(storetest_mysql_url: str) -> Iterator[Any]:
    # The correct store the broken MariaDB stores are variants of, in a fresh database.
    from tests.broken_stores.mysql_variants import plain_store

    yield from plain_store(storetest_mysql_url)


def _items() -> Factory:
    from tests.item_histories import memory_sessions

    return item_sessions(memory_sessions)


def _chats() -> Factory:
    from tests.broken_stores.chat_variants import memory_chat

    return chat_histories(memory_chat)


def reference(broken: BrokenStore) -> tuple[str, Factory, Factory | None]:
    """The correct store of ``broken``'s kind: its name, factory and replica factory
    (a replica only when ``broken`` has one, so both run the same clauses)."""
    if isinstance(broken.factory, ChatHistories):  # before ItemSessions: a subclass of it
        return "chat history in memory", _chats(), None
    if isinstance(broken.factory, ItemSessions):
        return "item history in memory", _items(), None
    if broken.backend in ("memory", "explained"):
        from tests.broken_stores.memory_variants import PlainMemoryStore

        made = broken.factory()  # memory stores take no fixtures; a plain one is threaded
        name, factory = ("plain memory store", _plain_memory) if isinstance(made, PlainMemoryStore) else (
            "memory store", _memory)
    elif broken.backend == "sqlite":
        name, factory = "SQLite store", _sqlite
    elif broken.backend == "postgres":
        name, factory = "PostgreSQL store", _postgres
    elif broken.backend == "mysql":
        name, factory = "MariaDB store", _mysql
    else:
        raise ValueError(f"{broken.name}: no reference store for backend {broken.backend!r}")
    if broken.replica is None:
        return name, factory, None
    return f"{name} + replica", factory, _memory_replica if broken.backend in ("memory", "explained") else factory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="only these backends (default: all)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--adjacent", action="store_true",
                        help="time the reference store again right before each broken store and divide by that "
                             "run (for a machine whose load changes during the run)")
    parser.add_argument("--store", action="append", help="only these broken stores (default: all of the backend)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="with --adjacent: time each broken store this many times, each right after its "
                             "reference, and report the median of the ratios (one pair is noise on a loaded "
                             "machine)")
    args = parser.parse_args(argv)
    if args.repeat > 1 and not args.adjacent:
        parser.error("--repeat needs --adjacent (each ratio is over the reference run just before it)")
    backends = args.backend or list(BACKENDS)
    with fixtures_outside_pytest() as fixture:

        #: Per kind of store, the clauses its correct store passes (or does not claim).
        fair: dict[str, list[str]] = {}

        def timed(factory: Factory, replica: Factory | None, kind: str) -> tuple[float, bool]:
            started = time.perf_counter()
            report = check(factory, replica, seed=args.seed, fixtures=fixture, clauses=fair.get(kind))
            seconds = time.perf_counter() - started
            if kind not in fair:  # the warm-up run of the correct store
                fair[kind] = [r.clause for r in report.results if r.outcome != "failed"]
                left_out = [r.clause for r in report.results if r.outcome == "failed"]
                if left_out:
                    print(f"({kind}: left out, as the correct store fails them: {', '.join(left_out)})")
            return seconds, report.ok

        print("| backend | store | passing store of its kind | seconds | x passing | verdict |")
        print("|---|---|---|---|---|---|")
        for backend in backends:
            broken = [b for b in registry() if b.backend == backend and (not args.store or b.name in args.store)]
            kinds = {b.name: reference(b) for b in broken}
            passing: dict[str, list[float]] = {}
            for name, factory, replica in {k[0]: k for k in kinds.values()}.values():
                timed(factory, replica, name)  # warm: the server, imports; which clauses it passes
                passing[name] = [timed(factory, replica, name)[0]]
            rows = []
            for b in broken:
                name, factory, replica = kinds[b.name]
                pairs = []
                for _ in range(args.repeat):
                    near = timed(factory, replica, name)[0] if args.adjacent else 0.0
                    if near:
                        passing[name].append(near)
                    seconds, ok = timed(b.factory, b.replica, name)
                    pairs.append((seconds / near if near else 0.0, seconds, ok, near))
                # The pair whose ratio is the median (the lower middle one of an even count).
                _, seconds, ok, near = sorted(pairs)[(len(pairs) - 1) // 2]
                ok = any(p[2] for p in pairs)
                rows.append((b.name, name, seconds, ok, near))
            for name, factory, replica in {k[0]: k for k in kinds.values()}.values():
                passing[name].append(timed(factory, replica, name)[0])
            base = {name: statistics.median(times) for name, times in passing.items()}
            for name in base:
                print(f"| {backend} | (passing) | {name} | {base[name]:.2f} | 1.00 | pass |")
            ratios = []
            for store, name, seconds, ok, near in rows:
                ratios.append(seconds / (near or base[name]))
                print(f"| {backend} | {store} | {name} | {seconds:.2f} | {ratios[-1]:.2f} | "
                      f"{'pass (not caught!)' if ok else 'fail'} |", flush=True)
            if ratios:
                print(f"| {backend} | median failing | | | {statistics.median(ratios):.2f} | |")
                print(f"| {backend} | worst failing | | | {max(ratios):.2f} | |", flush=True)
    print(f"\nFast-mode throwaway servers, as the tests run. {load_average()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
