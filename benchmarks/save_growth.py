"""How a save's cost grows with the transcript, backend by backend, in one run.

An agent saves its whole transcript before every model request. This script grows a
conversation of ~500-byte messages one message per save, as an agent does, and
reports the median time of the saves around turn 20 and around turn 2,000 (each one
saving the whole transcript), and their ratio. A store that writes only the new tail
stays near 1x; one that rewrites everything grows about linearly (~100x).

Each backend runs two ways, alternating conversation by conversation: one handle
saving every turn, and two handles on the same backend taking turns (replicas behind
a load balancer), so that every save is made by a handle that did not write the last
version and must learn what the other wrote.

    python benchmarks/save_growth.py                      # every backend available
    python benchmarks/save_growth.py --backend postgres --repeats 5

Databases come from ``storetest.databases.throwaway`` (``STORETEST_POSTGRES_URL``, a
Docker engine, or local server binaries, stopped at the end; Redis under a key prefix
of the run's own, with no persistence on a server it starts). To add a backend, add an
entry to ``BACKENDS``: an async context manager taking a private directory and
yielding two store handles on one backend (async or sync methods both work); raise
``Unavailable`` or ``ImportError`` to have it reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storetest import databases
from storetest.contract import Message, Role
from storetest.databases import Unavailable

Factory = Callable[[Path], AbstractAsyncContextManager[Any]]


@asynccontextmanager
async def _postgres(directory: Path) -> AsyncIterator[Any]:
    import asyncpg

    from reference_stores.postgres import SCHEMA, PostgresStore

    with databases.throwaway("postgres") as url:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)
            yield PostgresStore(pool), PostgresStore(pool)
        finally:
            await pool.close()


@asynccontextmanager
async def _sqlite(directory: Path) -> AsyncIterator[Any]:
    from reference_stores.sqlite import SQLiteStore

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench.sqlite3"
    with SQLiteStore(path) as a, SQLiteStore(path) as b:
        yield a, b


@asynccontextmanager
async def _mysql(directory: Path) -> AsyncIterator[Any]:
    from reference_stores.mysql import SCHEMA, MySQLStore

    with databases.throwaway("mysql") as url:
        conn, other = databases.mysql_connection(url), databases.mysql_connection(url)
        try:
            with conn.cursor() as cur:
                for statement in SCHEMA:
                    cur.execute(statement)
            conn.commit()
            yield MySQLStore(conn), MySQLStore(other)
        finally:
            conn.close()
            other.close()


@asynccontextmanager
async def _redis(directory: Path) -> AsyncIterator[Any]:
    from redis.asyncio import Redis

    from reference_stores.redis import RedisStore

    with databases.throwaway("redis") as (url, prefix):
        one, two = (Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10) for _ in range(2))
        try:
            yield RedisStore(one, prefix=prefix), RedisStore(two, prefix=prefix)
        finally:
            await one.aclose()
            await two.aclose()


#: Backend name -> factory. Other backends plug in here.
BACKENDS: dict[str, Factory] = {
    "postgres": _postgres,
    "mysql": _mysql,
    "sqlite": _sqlite,
    "redis": _redis,
}


@dataclass
class Result:
    backend: str
    handles: str = ""
    small_ms: float = 0.0
    large_ms: float = 0.0
    skipped: str = ""

    @property
    def ratio(self) -> float:
        return self.large_ms / self.small_ms if self.small_ms else float("nan")


def conversation(turns: int, size: int) -> list[Message]:
    filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    text = (filler * (size // len(filler) + 1))[:size]
    roles: tuple[Role, Role] = ("user", "assistant")
    return [Message.text(roles[i % 2], f"{i:06d} {text}"[:size]) for i in range(turns)]


async def _call(method: Callable[..., Any], *args: Any) -> Any:
    result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def measure(
    name: str, factory: Factory, directory: Path, args: argparse.Namespace
) -> list[Result]:
    conv = conversation(args.turns, args.size)
    small_turns = range(max(1, args.small - args.window + 1), args.small + 1)
    large_turns = range(args.turns - args.window + 1, args.turns + 1)
    times: dict[str, tuple[list[float], list[float]]] = {"one": ([], []), "two alternating": ([], [])}
    try:
        async with factory(directory) as (a, b):
            for repeat in range(args.repeats):
                for mode, (small, large) in times.items():
                    session = f"bench-{name}-{mode}-{repeat}-{time.time_ns()}"
                    for turn in range(1, args.turns + 1):
                        store = b if mode != "one" and turn % 2 == 0 else a
                        transcript = conv[:turn]
                        start = time.perf_counter()
                        await _call(store.save, session, transcript)
                        elapsed = (time.perf_counter() - start) * 1000
                        if turn in small_turns:
                            small.append(elapsed)
                        elif turn in large_turns:
                            large.append(elapsed)
                    stored = await _call(a.messages, session)
                    if stored != conv:
                        raise AssertionError(f"{name}: the stored transcript is not the saved one")
    except (Unavailable, ImportError) as exc:
        return [Result(name, skipped=str(exc))]
    return [
        Result(name, mode, statistics.median(small), statistics.median(large))
        for mode, (small, large) in times.items()
    ]


def _table(results: list[Result], args: argparse.Namespace) -> str:
    head = (
        f"{'backend':<10} {'handles':<16} {f'save @ {args.small} (ms)':>16} "
        f"{f'save @ {args.turns:,} (ms)':>19} {'ratio':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        if r.skipped:
            lines.append(f"{r.backend:<10} skipped: {r.skipped}")
        else:
            lines.append(
                f"{r.backend:<10} {r.handles:<16} {r.small_ms:>16.3f} {r.large_ms:>19.3f} {r.ratio:>6.2f}x"
            )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, base: Path) -> list[Result]:
    results = []
    for name in args.backend or list(BACKENDS):
        results.extend(await measure(name, BACKENDS[name], base / name, args))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", action="append", choices=sorted(BACKENDS), help="repeatable; default: all"
    )
    parser.add_argument("--turns", type=int, default=2000, help="the long end (default 2000)")
    parser.add_argument("--small", type=int, default=20, help="the short end (default 20)")
    parser.add_argument("--window", type=int, default=10, help="saves per end per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="conversations per backend")
    parser.add_argument("--size", type=int, default=500, help="characters per message")
    args = parser.parse_args(argv)
    if not args.window <= args.small < args.turns - args.window:
        parser.error("need window <= small < turns - window")
    with tempfile.TemporaryDirectory(prefix="storetest-bench-") as tmp:
        results = asyncio.run(main_async(args, Path(tmp)))
    print(
        f"median save time, whole transcript of {args.size}-character messages, "
        f"{args.repeats} conversation(s) x {args.window} saves per end"
    )
    print(_table(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
