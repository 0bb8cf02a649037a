"""How a save's cost grows with the transcript, backend by backend, in one run.

An agent saves its whole transcript before every model request. This script grows a
conversation one message per save, as an agent does (``common.AGENT``: tool calls
with raw JSON arguments, tool results, an attachment, one-text messages;
``--workload one-text`` for 500-character one-text messages only), and
reports the median time of saves at turn 20 and at turn 2,000 (each one saving the
whole transcript), and their ratio. A store that writes only the new tail stays near
1x; one that rewrites everything grows about linearly (~100x).

Each backend runs two ways: one handle saving every turn, and two handles on the same
backend taking turns (replicas behind a load balancer), so that every save is made by
a handle that did not write the last version and must learn what the other wrote. Four
sessions per backend (each way, each end) start just below their end and grow by one
message a round; every round saves each once, in a rotating order, so machine noise
hits both ends alike (the small end drifts from turn 20 to 20 + rounds).

    python benchmarks/save_growth.py                      # every backend available
    python benchmarks/save_growth.py --backend postgres --rounds 200

Every backend runs durable, read back and printed with the figures: SQLite in WAL mode
with the store's default ``synchronous=FULL``; PostgreSQL and MariaDB on servers from
``storetest.databases.throwaway(..., durable=True)`` (``STORETEST_POSTGRES_URL``, a
Docker engine, or local server binaries, stopped at the end; a server that is not
durable is refused); Redis under a key prefix of the run's own, on a server it starts
with no persistence (``appendonly``/``appendfsync`` printed as read back: it is compared
with nothing here). To add a backend, add an entry to ``BACKENDS``: an async context
manager taking a private directory and yielding two store handles on one backend
(async or sync methods both work) and a line saying its durability, as read back;
raise ``Unavailable`` or ``ImportError`` to have it reported as skipped.
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

from common import (
    AGENT,
    ONE_TEXT,
    agent_messages,
    load_average,
    one_text_messages,
    server_durability,
    sqlite_durability,
)

from storetest import databases
from storetest.contract import Message
from storetest.databases import Unavailable

Factory = Callable[[Path], AbstractAsyncContextManager[Any]]


@asynccontextmanager
async def _postgres(directory: Path) -> AsyncIterator[Any]:
    import asyncpg

    from reference_stores.postgres import SCHEMA, PostgresStore

    with databases.throwaway("postgres", durable=True) as url:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)
            yield PostgresStore(pool), PostgresStore(pool), server_durability("postgres", url)
        finally:
            await pool.close()


@asynccontextmanager
async def _sqlite(directory: Path) -> AsyncIterator[Any]:
    from reference_stores.sqlite import SQLiteStore

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "bench.sqlite3"
    with SQLiteStore(path) as a, SQLiteStore(path) as b:
        yield a, b, sqlite_durability(a._conn)


@asynccontextmanager
async def _mysql(directory: Path) -> AsyncIterator[Any]:
    from reference_stores.mysql import SCHEMA, MySQLStore

    with databases.throwaway("mysql", durable=True) as url:
        conn, other = databases.mysql_connection(url), databases.mysql_connection(url)
        try:
            with conn.cursor() as cur:
                for statement in SCHEMA:
                    cur.execute(statement)
            conn.commit()
            yield MySQLStore(conn), MySQLStore(other), server_durability("mysql", url)
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
            settings = {key: (await one.config_get(key))[key] for key in ("appendonly", "appendfsync")}
            shown = ", ".join(f"{k}={v.decode() if isinstance(v, bytes) else v}" for k, v in settings.items())
            yield RedisStore(one, prefix=prefix), RedisStore(two, prefix=prefix), shown
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
    durability: str = ""

    @property
    def ratio(self) -> float:
        return self.large_ms / self.small_ms if self.small_ms else float("nan")


WORKLOADS = {"agent": (AGENT, agent_messages), "one-text": (ONE_TEXT, one_text_messages)}


async def _call(method: Callable[..., Any], *args: Any) -> Any:
    result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def measure(
    name: str, factory: Factory, directory: Path, args: argparse.Namespace
) -> list[Result]:
    conv: list[Message] = WORKLOADS[args.workload][1](args.turns + args.rounds)
    modes, ends = ("one", "two alternating"), {"small": args.small, "large": args.turns}
    times: dict[tuple[str, str], list[float]] = {(mode, end): [] for mode in modes for end in ends}
    try:
        async with factory(directory) as (a, b, durability):
            # Each (mode, end) grows a session of its own, one message per round, from
            # just below its end; the rounds interleave them all, in a rotating order.
            sessions: dict[tuple[str, str], tuple[str, list[Message]]] = {}
            for mode, end in times:
                session = f"bench-{name}-{mode}-{end}-{time.time_ns()}"
                transcript = conv[: ends[end] - 1]
                await _call(a.save, session, transcript)
                if mode != "one":
                    await _call(b.messages, session)  # a replica joins by reading
                sessions[(mode, end)] = (session, transcript)
            order = list(times)
            for r in range(args.rounds):
                for mode, end in order[r % len(order) :] + order[: r % len(order)]:
                    # Two alternating: b first (a wrote last), so every save is made by
                    # the handle that did not write the last version.
                    store = b if mode != "one" and r % 2 == 0 else a
                    session, transcript = sessions[(mode, end)]
                    transcript.append(conv[len(transcript)])
                    start = time.perf_counter()
                    await _call(store.save, session, transcript)
                    times[(mode, end)].append((time.perf_counter() - start) * 1000)
            for session, transcript in sessions.values():
                if await _call(a.messages, session) != transcript:
                    raise AssertionError(f"{name}: the stored transcript of {session} is not the saved one")
    except (Unavailable, ImportError) as exc:
        return [Result(name, skipped=str(exc))]
    return [
        Result(
            name,
            mode,
            statistics.median(times[(mode, "small")]),
            statistics.median(times[(mode, "large")]),
            durability=durability,
        )
        for mode in modes
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
    parser.add_argument("--rounds", type=int, default=60, help="interleaved rounds (default 60)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="agent", help="default: agent")
    args = parser.parse_args(argv)
    if not 1 < args.small < args.turns or args.rounds < 1:
        parser.error("need 1 < small < turns and rounds >= 1")
    with tempfile.TemporaryDirectory(prefix="storetest-bench-") as tmp:
        results = asyncio.run(main_async(args, Path(tmp)))
    print(
        f"median save time, whole transcript, {args.rounds} interleaved rounds "
        f"(each end's session grows by one message a round)\n"
        f"workload: {WORKLOADS[args.workload][0]}\n{load_average()}"
    )
    print(_table(results, args))
    for backend in dict.fromkeys(r.backend for r in results if r.durability):
        durability = next(r.durability for r in results if r.backend == backend)
        print(f"{backend} durability, read back: {durability}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
