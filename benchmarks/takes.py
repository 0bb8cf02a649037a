"""What a take (and a PostgreSQL add) costs now against before issue 11's fewer round
trips, side by side in one run: the old and the new call alternate, in turn order
swapped every round, on one connection, so machine noise hits both.

    PYTHONPATH=. python benchmarks/takes.py
    PYTHONPATH=. python benchmarks/takes.py --backend postgres --repeats 400

"old" is the code before the change. On PostgreSQL it is reproduced here: a take is
the probe, then BEGIN, ``SELECT ... FOR UPDATE``, ``DELETE ... RETURNING`` and COMMIT
in round trips of their own (5), an add BEGIN, the session row's creation, its share
lock, the INSERT and COMMIT (5); "new" is ``PostgresStore`` (4 and 3). On MariaDB "old"
is the store's own take without ``DELETE ... RETURNING`` (what MySQL still runs):
``SELECT ... FOR UPDATE`` of the steers, then a DELETE per 1,000 ids (6, or 5 plus a
DELETE per 1,000 steers); "new" deletes and returns them in one statement (5).
``tests/test_postgres_store.py`` and ``tests/test_mysql_store.py`` count these round
trips on the wire.

On PostgreSQL the empty take is the same code in both columns (the probe): its ratio
shows the noise. On MariaDB it is the same round trips (an empty DELETE against an
empty SELECT). PostgreSQL times include the asyncpg pool's reset query on release (one
more round trip, in both columns). Each round uses sessions of its own. Databases come
from ``storetest.databases.throwaway``, in its fast mode (old and new share one
connection, so one durability; printed, read back from the server, with the load).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from common import load_average, server_durability

from storetest import databases
from storetest.databases import Unavailable

#: Backend -> its server's durability settings, read back when the run starts. Both
#: columns run on one connection, so at one durability: the fast throwaway server's,
#: where a take's cost is its round trips and work, not a commit's flush.
DURABILITY: dict[str, str] = {}

#: A queue size at which MariaDB's old take needs two DELETEs.
BIG = 1500


@dataclass
class Contender:
    """One way to call the store: ``take(session)`` and ``add(session, text)`` may be
    plain or async; ``fill(session, n)`` queues ``n`` steers, untimed."""

    take: Callable[[str], Any]
    add: Callable[[str, str], Any] | None
    fill: Callable[[str, int], Any]


@dataclass
class Backend:
    name: str
    old: Contender
    new: Contender
    times: dict[str, dict[str, list[float]]] = field(default_factory=dict)


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


# -- PostgreSQL ---------------------------------------------------------------------------


@asynccontextmanager
async def _postgres() -> AsyncIterator[Backend]:
    import asyncpg

    from reference_stores.postgres import SCHEMA, PostgresStore

    class OldPostgres(PostgresStore):
        """The add and the take as they were (less their error handling): every statement
        a round trip of its own."""

        async def add_steer(self, session: str, text: str) -> None:
            key = session.encode("utf-8")
            async with self._connection("add_steer to", session) as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO storetest_sessions (session, version) VALUES ($1, 0) ON CONFLICT (session) DO NOTHING",
                    key,
                )
                await conn.execute("SELECT 1 FROM storetest_sessions WHERE session = $1 FOR KEY SHARE", key)
                await conn.execute(
                    "INSERT INTO storetest_steers (session, text) VALUES ($1, $2)", key, text.encode("utf-8")
                )

        async def take_steers(self, session: str) -> list[str]:
            key = session.encode("utf-8")
            async with self._connection("take_steers from", session) as conn:
                if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM storetest_steers WHERE session = $1)", key):
                    return []
                async with conn.transaction():
                    if (
                        await conn.fetchval("SELECT 1 FROM storetest_sessions WHERE session = $1 FOR UPDATE", key)
                        is None
                    ):
                        return []
                    rows = await conn.fetch(
                        "WITH d AS (DELETE FROM storetest_steers WHERE session = $1 RETURNING id, text) "
                        "SELECT text FROM d ORDER BY id",
                        key,
                    )
            return [bytes(r["text"]).decode("utf-8") for r in rows]

    ensure = "INSERT INTO storetest_sessions (session, version) VALUES ($1, 0) ON CONFLICT (session) DO NOTHING"

    with databases.throwaway("postgres") as url:
        DURABILITY["postgres"] = server_durability("postgres", url)
        # One connection, shared by both contenders.
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)

            async def fill(session: str, n: int) -> None:
                await pool.execute(ensure, session.encode("utf-8"))
                await pool.execute(
                    "INSERT INTO storetest_steers (session, text) "
                    "SELECT $1, convert_to(lpad(g::text, 6, '0'), 'UTF8') FROM generate_series(0, $2 - 1) g",
                    session.encode("utf-8"),
                    n,
                )

            old, new = OldPostgres(pool), PostgresStore(pool)
            yield Backend(
                "postgres",
                Contender(old.take_steers, old.add_steer, fill),
                Contender(new.take_steers, new.add_steer, fill),
            )
        finally:
            await pool.close()


# -- MariaDB ------------------------------------------------------------------------------


@asynccontextmanager
async def _mysql() -> AsyncIterator[Backend]:
    from reference_stores import mysql
    from reference_stores.mysql import SCHEMA, MySQLStore

    @contextlib.contextmanager
    def without_returning() -> Iterator[None]:
        returning = mysql._deletes_returning
        mysql._deletes_returning = lambda conn: False
        try:
            yield
        finally:
            mysql._deletes_returning = returning

    with databases.throwaway("mysql") as url:
        DURABILITY["mysql"] = server_durability("mysql", url)
        conn = databases.mysql_connection(url)
        try:
            with conn.cursor() as cur:
                for statement in SCHEMA:
                    cur.execute(statement)
            conn.commit()
            if not mysql._deletes_returning(conn):
                raise Unavailable(f"{conn.get_server_info()} has no DELETE ... RETURNING: old and new are one take")
            store = MySQLStore(conn)

            def old_take(session: str) -> list[str]:
                with without_returning():
                    return store.take_steers(session)

            def fill(session: str, n: int) -> None:
                with conn.cursor() as cur:
                    cur.execute(
                        "INSERT INTO agent_sessions (session, version) VALUES (%s, 0) "
                        "ON DUPLICATE KEY UPDATE version = version",
                        (session.encode("utf-8"),),
                    )
                    cur.executemany(
                        "INSERT INTO agent_steers (session, text) VALUES (%s, %s)",
                        [(session.encode("utf-8"), f"{i:06d}".encode()) for i in range(n)],
                    )
                conn.commit()

            yield Backend("mysql", Contender(old_take, None, fill), Contender(store.take_steers, None, fill))
        finally:
            conn.close()


BACKENDS: dict[str, Callable[[], Any]] = {"postgres": _postgres, "mysql": _mysql}


async def _timed(call: Callable[[], Awaitable[Any] | Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await _call(call())
    return (time.perf_counter() - start) * 1000, result


async def measure(backend: Backend, repeats: int, big_repeats: int) -> None:
    contenders = {"old": backend.old, "new": backend.new}
    names = ["empty take", "take of 1", f"take of {BIG:,}"] + (["add_steer"] if backend.new.add else [])
    backend.times = {name: {"old": [], "new": []} for name in names}
    # Every statement used once on the connection (asyncpg prepares on first use).
    for who, contender in contenders.items():
        await _call(contender.fill(f"warm-{who}", 1))
        await _call(contender.take(f"warm-{who}"))
        await _call(contender.take(f"warm-{who}"))
        if contender.add:
            await _call(contender.add(f"warm-{who}", "warm"))
            await _call(contender.take(f"warm-{who}"))
    for n in range(repeats):
        for who in ("old", "new") if n % 2 else ("new", "old"):
            await _round(backend, who, f"{who}-{n}", big=n < big_repeats)


async def _round(backend: Backend, who: str, session: str, *, big: bool) -> None:
    """One of each measure, on a session of its own: a queue that grew and shrank in
    earlier rounds would leave dead rows in the index range every take reads."""
    contender = backend.new if who == "new" else backend.old
    times = backend.times
    await _call(contender.fill(session, 0))  # the session's row: add_steer makes it
    elapsed, got = await _timed(lambda: contender.take(session))
    assert got == [], got
    times["empty take"][who].append(elapsed)
    await _call(contender.fill(session, 1))
    elapsed, got = await _timed(lambda: contender.take(session))
    assert got == ["000000"], got
    times["take of 1"][who].append(elapsed)
    add = contender.add
    if add:
        elapsed, _ = await _timed(lambda: add(session, "added"))
        times["add_steer"][who].append(elapsed)
        assert await _call(contender.take(session)) == ["added"]
    if big:
        await _call(contender.fill(session, BIG))
        elapsed, got = await _timed(lambda: contender.take(session))
        assert got == [f"{i:06d}" for i in range(BIG)], "the take lost, duplicated or reordered steers"
        times[f"take of {BIG:,}"][who].append(elapsed)


async def main_async(args: argparse.Namespace) -> list[tuple[str, str]]:
    done: list[tuple[str, str]] = []
    for name in args.backend or list(BACKENDS):
        try:
            async with BACKENDS[name]() as backend:
                await measure(backend, args.repeats, args.big_repeats)
        except (Unavailable, ImportError) as exc:
            done.append((name, f"{name:<10} skipped: {exc}"))
            continue
        lines = []
        for measure_name, times in backend.times.items():
            old, new = statistics.median(times["old"]), statistics.median(times["new"])
            lines.append(f"{name:<10} {measure_name:<14} {old:>10.3f} {new:>10.3f} {new / old:>8.2f}x")
        done.append((name, "\n".join(lines)))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=sorted(BACKENDS), help="repeatable; default: all")
    parser.add_argument("--repeats", type=int, default=300, help="rounds of the small measures (default 300)")
    parser.add_argument("--big-repeats", type=int, default=40, help=f"rounds of the take of {BIG:,} (default 40)")
    args = parser.parse_args(argv)
    results = asyncio.run(main_async(args))
    print(f"median time per call, {args.repeats} interleaved rounds ({args.big_repeats} for the take of {BIG:,})")
    head = f"{'backend':<10} {'measure':<14} {'old (ms)':>10} {'new (ms)':>10} {'new/old':>9}"
    print(head)
    print("-" * len(head))
    for _, text in results:
        print(text)
    for name, durability in DURABILITY.items():
        print(f"{name} durability, read back: {durability}")
    print(load_average())
    return 0


if __name__ == "__main__":
    sys.exit(main())
