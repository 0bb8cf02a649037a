"""The fault suite on PostgreSQL: SIGKILL of client processes, and connections
killed at random points (see ``test_faults_sqlite.py`` for what is asserted)."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.faults import connkill, kill, logconn, restart
from tests.faults.proxy import POSTGRES_COMMIT, CuttingProxy
from tests.faults.servers import PrivateServer, skip_unless_private
from tests.faults.settings import CONNECTION_KILLS, CUT_SHARE, KILLS, SEED, report

asyncpg = pytest.importorskip("asyncpg")

from reference_stores.postgres import SCHEMA, PostgresStore  # noqa: E402
from reference_stores.postgres_log import SCHEMA as LOG_SCHEMA  # noqa: E402
from reference_stores.postgres_log import PostgresLogStore  # noqa: E402


class _SyncPostgres:
    """The parent's view of Postgres: a PostgresStore driven from plain calls."""

    def __init__(self, url: str) -> None:
        async def pool() -> Any:
            return await asyncpg.create_pool(url, min_size=1, max_size=1)

        self._runner = asyncio.Runner()
        self._pool = self._runner.run(pool())
        self._store = PostgresStore(self._pool)

    def messages(self, session: str) -> Any:
        return self._runner.run(self._store.messages(session))

    def save(self, session: str, messages: Any) -> None:
        self._runner.run(self._store.save(session, messages))

    def take_steers(self, session: str) -> list[str]:
        return self._runner.run(self._store.take_steers(session))

    def close(self) -> None:
        self._runner.run(self._pool.close())
        self._runner.close()


def _behind_a_proxy(url: str) -> tuple[CuttingProxy, str]:
    """A proxy in front of the server at ``url``, and the URL that goes through it."""
    parts = urlsplit(url)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return proxy, urlunsplit((parts.scheme, f"{userinfo}127.0.0.1:{proxy.port}", parts.path, "", ""))


def _postgres_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("storetest_postgres_url")

    async def apply() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(SCHEMA)
            # Sessions of earlier runs on a server from STORETEST_POSTGRES_URL.
            await conn.execute(
                "DELETE FROM storetest_steers WHERE session IN ($1, $2)",
                kill.QUEUE.encode(), connkill.QUEUE.encode(),
            )
        finally:
            await conn.close()

    asyncio.run(apply())
    return url


def test_sigkill_of_saving_adding_and_taking_processes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Postgres clients killed mid-save, mid-add and mid-take leave whole transcripts
    and a queue that lost, duplicated and reordered nothing."""
    url = _postgres_url(request)

    async def open_store() -> Any:
        return PostgresStore(await asyncpg.create_pool(url, min_size=1, max_size=1))

    checker = _SyncPostgres(url)
    try:
        figures = kill.run(open_store, checker, KILLS, tmp_path, SEED)
    finally:
        checker.close()
    report("SIGKILL postgres", figures)


def test_postgres_connections_killed_at_random_points(request: pytest.FixtureRequest) -> None:
    """pg_terminate_backend and cuts after COMMIT, at random moments of every operation."""
    url = _postgres_url(request)
    proxy, proxied = _behind_a_proxy(url)
    application = f"storetest_faults_{secrets.token_hex(4)}"
    rng = random.Random(SEED)
    kills: Counter[str] = Counter()

    async def main() -> dict[str, Any]:
        settings = {"application_name": application}
        pools = [
            await asyncpg.create_pool(proxied, min_size=1, max_size=4, server_settings=settings)
            for _ in range(2)
        ]
        direct = await asyncpg.create_pool(url, min_size=1, max_size=2)
        admin = await asyncpg.connect(url)
        run = connkill.Run(checker=PostgresStore(direct))
        sessions = [f"conn-{secrets.token_hex(3)}-{i}" for i in range(2)]
        tasks = [
            asyncio.ensure_future(w())
            for w in connkill.workers(run, [PostgresStore(p) for p in pools], sessions)
        ]
        try:
            while sum(kills.values()) < CONNECTION_KILLS:
                await asyncio.sleep(connkill.pause(rng))
                if rng.random() < CUT_SHARE:
                    before = proxy.cuts
                    proxy.cut_after_commit(POSTGRES_COMMIT)
                    await asyncio.sleep(0.02)
                    kills["cut after COMMIT"] += proxy.cuts - before
                    continue
                pids = await admin.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1", application
                )
                if pids and await admin.fetchval(
                    "SELECT pg_terminate_backend($1)", rng.choice(pids)["pid"]
                ):
                    kills["pg_terminate_backend"] += 1
            run.stop.set()
            await asyncio.gather(*tasks)
            await connkill.drain(run)
        finally:
            run.stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await admin.close()
            for pool in [*pools, direct]:
                pool.terminate()
            proxy.close()
        return connkill.figures(run, kills)

    report("connection kills postgres", asyncio.run(main()))


# Server restarts and stalls (issue 33) ---------------------------------------------

BOUND = 1.5  # the stores' timeout in these tests


def _pg_ready(url: str) -> bool:
    async def probe() -> None:
        conn = await asyncpg.connect(url, timeout=2)
        await conn.close()

    try:
        asyncio.run(probe())
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return False
    return True


@pytest.fixture
def private_postgres() -> Iterator[PrivateServer]:
    """A PostgreSQL server of this test's own, to restart; with its tables."""
    skip_unless_private("postgres")
    server = PrivateServer("postgres", _pg_ready)

    async def apply() -> None:
        conn = await asyncpg.connect(server.url)
        try:
            await conn.execute(SCHEMA)
            await conn.execute(LOG_SCHEMA)
        finally:
            await conn.close()

    try:
        asyncio.run(apply())
        yield server
    finally:
        server.close()


def test_postgres_restarted_under_a_workload_of_several_processes(private_postgres: PrivateServer) -> None:
    """Fast and immediate shutdowns and SIGKILL of the server, down 2 s each, under
    savers, adders, takers and log appenders in three processes: nothing lost,
    duplicated, torn or landed after failing; every call inside an outage fails within
    the bound; every handle works afterwards."""
    url = private_postgres.url
    parts = urlsplit(url)
    proxy = CuttingProxy("127.0.0.1", parts.port or 5432)
    proxied = urlunsplit((parts.scheme, f"postgres@127.0.0.1:{proxy.port}", parts.path, "", ""))

    async def open_stores() -> dict[str, Any]:
        pool = await asyncpg.create_pool(proxied, min_size=1, max_size=4)
        return {"store": PostgresStore(pool, timeout=BOUND), "log": PostgresLogStore(pool, timeout=BOUND)}

    async def _drain() -> list[str]:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            store, taken = PostgresStore(pool), []
            while got := await store.take_steers(restart.QUEUE):
                taken += got
            return taken
        finally:
            await pool.close()

    async def _log(session: str) -> list[str]:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            return [e.id for e in await PostgresLogStore(pool).entries(session)]
        finally:
            await pool.close()

    try:
        figures = restart.run(
            private_postgres, proxy, POSTGRES_COMMIT, open_stores, lambda: asyncio.run(_drain()),
            lambda s: asyncio.run(_log(s)), ["fast", "immediate", "SIGKILL"], BOUND,
        )
    finally:
        proxy.close()
    report("restarts postgres", figures)


def test_postgres_connections_stalled_past_the_bound(request: pytest.FixtureRequest) -> None:
    """The network stalled (forwarding nothing, resetting nothing) for longer than the
    stores' timeout, between statements and right after a COMMIT went up, under savers,
    adders, takers and log appenders and readers: every call ends within the bound +
    1 s, nothing is lost, duplicated or torn, and the same handles work once the
    network does."""
    url = _postgres_url(request)
    proxy, proxied = _behind_a_proxy(url)

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        pools = [await asyncpg.create_pool(proxied, min_size=1, max_size=4) for _ in range(2)]
        direct = await asyncpg.create_pool(url, min_size=1, max_size=2)
        async with direct.acquire() as conn:
            await conn.execute(LOG_SCHEMA)
        run = connkill.Run(checker=PostgresStore(direct))
        log_run = logconn.LogRun(checker=None)
        sessions = [f"stall-{secrets.token_hex(3)}-{i}" for i in range(2)]
        stores = [PostgresStore(p, timeout=BOUND) for p in pools]
        logs = [PostgresLogStore(p, timeout=BOUND) for p in pools]
        tasks = [asyncio.ensure_future(w()) for w in connkill.workers(run, stores, sessions)]
        tasks += [asyncio.ensure_future(w()) for w in logconn.workers(log_run, logs, sessions, SEED)]
        try:
            windows = await connkill.stall_twice(proxy, POSTGRES_COMMIT, BOUND + 1)
            run.stop.set()
            log_run.stop.set()
            await asyncio.gather(*tasks)
            await logconn.handles_work_after(run, stores, logs, sessions[0])
            await connkill.drain(run)
            log_figures = await logconn.final_figures(log_run, PostgresLogStore(direct))
        finally:
            run.stop.set()
            log_run.stop.set()
            proxy.resume()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for pool in [*pools, direct]:
                pool.terminate()
            proxy.close()
        return ({"stalls": connkill.stall_rows(run, windows, BOUND), **connkill.figures(run, Counter())},
                {"stalls": connkill.stall_rows(log_run, windows, BOUND), **log_figures})

    figures, log_figures = asyncio.run(main())
    report("stalls postgres", figures)
    report("stalls postgres log", log_figures)


def test_postgres_log_held_connections_killed_and_stalled(request: pytest.FixtureRequest) -> None:
    """Log handles holding their connection (``hold_connection=True``), one per pool,
    appending and reading while the server kills their connections at random moments
    (``pg_terminate_backend``, mid-statement or between calls) and the network stalls
    twice past the bound (once right after an append went up): nothing lost,
    duplicated, torn or landed after failing; every call ends within the bound + 1 s; a
    call fails only where a kill or a stall explains it; each handle works afterwards
    on a new connection; and ``aclose`` gives every held connection back, so the pools
    close without waiting."""
    url = _postgres_url(request)
    proxy, proxied = _behind_a_proxy(url)
    application = f"storetest_held_{secrets.token_hex(4)}"
    rng = random.Random(SEED)
    kills: Counter[str] = Counter()
    killed_at: list[float] = []

    async def main() -> dict[str, Any]:
        settings = {"application_name": application}
        pools = [
            await asyncpg.create_pool(proxied, min_size=1, max_size=2, server_settings=settings)
            for _ in range(2)
        ]
        direct = await asyncpg.create_pool(url, min_size=1, max_size=2)
        admin = await asyncpg.connect(url)
        await admin.execute(LOG_SCHEMA)
        log_run = logconn.LogRun(checker=None)
        sessions = [f"held-{secrets.token_hex(3)}-{i}" for i in range(2)]
        logs = [PostgresLogStore(p, timeout=BOUND, hold_connection=True) for p in pools]
        tasks = [asyncio.ensure_future(w()) for w in logconn.workers(log_run, logs, sessions, SEED)]
        try:
            while sum(kills.values()) < CONNECTION_KILLS // 4:
                await asyncio.sleep(connkill.pause(rng))
                pids = await admin.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = $1", application
                )
                if pids and await admin.fetchval("SELECT pg_terminate_backend($1)", rng.choice(pids)["pid"]):
                    kills["pg_terminate_backend"] += 1
                    killed_at.append(time.monotonic())
            # An append commits by itself (no COMMIT goes up): the second stall comes
            # right after an append's batch went up (its ids, in the Bind message).
            appended = tuple(f"w{s}{i}.".encode() for s in range(2) for i in range(2))
            windows = await connkill.stall_twice(proxy, POSTGRES_COMMIT, BOUND + 1, [
                ("before a statement", None), ("after an append went up", appended)])
            log_run.stop.set()
            await asyncio.gather(*tasks)
            for i, log in enumerate(logs):  # the same handles, on new connections
                await log.append(f"{sessions[0]}-after", logconn.batch(f"end{i}", 1, 2))
            figures = await logconn.final_figures(log_run, PostgresLogStore(direct))
            for log in logs:
                await log.aclose()
            for pool in pools:
                await asyncio.wait_for(pool.close(), 10)  # waits for any connection still held
        finally:
            log_run.stop.set()
            proxy.resume()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await admin.close()
            for pool in [*pools, direct]:
                pool.terminate()
            proxy.close()
        # A call fails only where a kill landed during it, or a stall held it up (or the
        # connection it left behind): one handle's calls taking turns never trip on each other.
        unexplained = [
            (op, outcome) for op, start, end, outcome in log_run.calls
            if outcome != "ok"
            and not any(start - 0.05 <= t <= end for t in killed_at)
            and not any(start <= w_end + BOUND and end >= w_start for _, w_start, w_end in windows)
        ]
        return {"stalls": connkill.stall_rows(log_run, windows, BOUND), "kills": dict(kills),
                "failures not explained by a kill or a stall": len(unexplained),
                "unexplained failures": unexplained[:5], **figures}

    report("held connections postgres log", asyncio.run(main()))
