"""The fault suite: the reference stores on real servers, under SIGKILL of the processes
using them and under connections killed at random points of every operation.

- SIGKILL (SQLite, PostgreSQL, MariaDB): a saving, an adding and a taking process run
  at once and are killed at random moments, ``STORETEST_FAULT_KILLS`` times per backend
  (default 120; see :mod:`tests.faults.kill`).
- Connection kills (PostgreSQL, MariaDB): ``pg_terminate_backend`` / ``KILL`` of the
  stores' connections, and cuts right after a COMMIT reached the server,
  ``STORETEST_FAULT_CONNECTION_KILLS`` times per backend (default 100; see
  :mod:`tests.faults.connkill`). SQLite has no connection to kill.

Each asserts 0 torn transcripts, 0 failed saves that changed something, 0 steers lost
(by a take that returned or raised anything but ``OutcomeUnknown``), 0 duplicated
(beyond retries after ``OutcomeUnknown``), 0 unexpected, 0 out of order, and that
every error is a ``StoreError`` naming its operation, its session and its cause. The
figures are printed (``pytest -rP`` shows them) and, with ``STORETEST_FAULT_FIGURES``
set to a path, appended to that file as JSON lines.

The MongoDB store stays out: no real MongoDB server can be had here (mongomock is not
MongoDB, and a fault in a fake proves nothing about the real thing).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.faults import connkill, kill
from tests.faults.proxy import MYSQL_COMMIT, POSTGRES_COMMIT, CuttingProxy

KILLS = int(os.environ.get("STORETEST_FAULT_KILLS", "120"))
CONNECTION_KILLS = int(os.environ.get("STORETEST_FAULT_CONNECTION_KILLS", "100"))
SEED = int(os.environ.get("STORETEST_FAULT_SEED", secrets.randbelow(2**32)))

# A quarter of the connection kills cut after COMMIT; the rest kill server-side.
_CUT_SHARE = 0.25

_ZERO = (
    "torn",
    "lost",
    "duplicated",
    "unexpected",
    "reordered",
    "failed saves that changed something",
    "errors not a StoreError naming operation, session and cause",
)


def _report(name: str, figures: dict[str, Any]) -> None:
    figures = {"run": name, "seed": SEED, **figures}
    text = json.dumps(figures, indent=1, default=str)
    sys.stdout.write(f"{text}\n")
    target = os.environ.get("STORETEST_FAULT_FIGURES")
    if target:
        with open(target, "a") as out:
            out.write(json.dumps(figures, default=str) + "\n")
    bad = {k: figures[k] for k in _ZERO if figures.get(k)}
    problems = figures["problems"][:10]
    assert not bad and not problems, f"{name} (seed {SEED}): {bad}; first problems: {problems}"


# -- backends -------------------------------------------------------------------------------


class _SyncPostgres:
    """The parent's view of Postgres: a PostgresStore driven from plain calls."""

    def __init__(self, url: str) -> None:
        import asyncpg

        from reference_stores.postgres import PostgresStore

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


def _postgres_url(request: pytest.FixtureRequest) -> str:
    pytest.importorskip("asyncpg")
    url: str = request.getfixturevalue("storetest_postgres_url")

    async def apply() -> None:
        import asyncpg

        from reference_stores.postgres import SCHEMA

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


@pytest.fixture
def mysql_db(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of this test's own, so its connections are easy to find and kill."""
    pytest.importorskip("pymysql")
    from reference_stores.mysql import SCHEMA
    from storetest._databases.mysql import connect

    server = urlsplit(request.getfixturevalue("storetest_mysql_url"))
    name = f"storetest_faults_{secrets.token_hex(4)}"
    root = urlunsplit((server.scheme, server.netloc, "/", "", ""))
    url = urlunsplit((server.scheme, server.netloc, f"/{name}", "", ""))
    with closing(connect(root, autocommit=True)) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    try:
        with closing(connect(url, autocommit=True)) as conn, conn.cursor() as cur:
            for statement in SCHEMA:
                cur.execute(statement)
        yield url
    finally:
        with closing(connect(root, autocommit=True)) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


# -- SIGKILL --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_sigkill_of_saving_adding_and_taking_processes(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Processes killed mid-save, mid-add and mid-take leave whole transcripts and a
    queue that lost, duplicated and reordered nothing."""
    checker: Any
    if backend == "sqlite":
        from reference_stores.sqlite import SQLiteStore

        path = tmp_path / "faults.db"
        # Remembering nothing, so every read comes from the rows themselves.
        checker = SQLiteStore(path, cache_sessions=0)
        opener: kill.Opener = lambda: SQLiteStore(path)  # noqa: E731
        close = checker.close
    elif backend == "postgres":
        url = _postgres_url(request)

        async def open_postgres() -> Any:
            import asyncpg

            from reference_stores.postgres import PostgresStore

            return PostgresStore(await asyncpg.create_pool(url, min_size=1, max_size=1))

        checker = _SyncPostgres(url)
        opener = open_postgres
        close = checker.close
    else:
        from reference_stores.mysql import MySQLStore
        from storetest._databases.mysql import connect

        db = request.getfixturevalue("mysql_db")
        conn = connect(db)
        checker = MySQLStore(conn, cache_sessions=0)
        opener = lambda: MySQLStore(connect(db))  # noqa: E731
        close = conn.close
    try:
        figures = kill.run(opener, checker, KILLS, tmp_path, SEED)
    finally:
        close()
    _report(f"SIGKILL {backend}", figures)


# -- connection kills -----------------------------------------------------------------------


def test_postgres_connections_killed_at_random_points(request: pytest.FixtureRequest) -> None:
    """pg_terminate_backend and cuts after COMMIT, at random moments of every operation."""
    import asyncpg

    from reference_stores.postgres import PostgresStore

    url = _postgres_url(request)
    parts = urlsplit(url)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    proxied = urlunsplit((parts.scheme, f"{userinfo}127.0.0.1:{proxy.port}", parts.path, "", ""))
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
                if rng.random() < _CUT_SHARE:
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

    _report("connection kills postgres", asyncio.run(main()))


def test_mysql_connections_killed_at_random_points(mysql_db: str) -> None:
    """KILL and cuts after COMMIT, at random moments of every operation, on stores
    given one connection and stores given a factory."""
    from reference_stores.mysql import MySQLStore
    from storetest._databases.mysql import connect

    parts = urlsplit(mysql_db)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 3306)
    proxied = urlunsplit((parts.scheme, f"{parts.netloc.rsplit(':', 1)[0]}:{proxy.port}", parts.path, "", ""))
    rng = random.Random(SEED)
    kills: Counter[str] = Counter()
    checker_conn = connect(mysql_db)
    admin = connect(mysql_db, autocommit=True)
    single = connect(proxied)
    stores = [MySQLStore(single), MySQLStore(lambda: connect(proxied))]
    run = connkill.Run(checker=MySQLStore(checker_conn, cache_sessions=0))
    sessions = [f"conn-{secrets.token_hex(3)}-{i}" for i in range(2)]
    errors: list[BaseException] = []

    def thread(work: Any) -> None:
        try:
            asyncio.run(work())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(w,)) for w in connkill.workers(run, stores, sessions)]
    for t in threads:
        t.start()
    try:
        with admin.cursor() as cur:
            spared = (checker_conn.thread_id(), admin.thread_id())
            while sum(kills.values()) < CONNECTION_KILLS:
                threading.Event().wait(connkill.pause(rng))
                if rng.random() < _CUT_SHARE:
                    before = proxy.cuts
                    proxy.cut_after_commit(MYSQL_COMMIT)
                    threading.Event().wait(0.02)
                    kills["cut after COMMIT"] += proxy.cuts - before
                    continue
                cur.execute(
                    "SELECT id FROM information_schema.processlist WHERE db = %s AND id NOT IN (%s, %s)",
                    (parts.path.lstrip("/"), *spared),
                )
                ids = [row[0] for row in cur.fetchall()]
                if ids:
                    try:
                        cur.execute(f"KILL {int(rng.choice(ids))}")
                        kills["KILL"] += 1
                    except Exception as exc:  # it ended by itself meanwhile
                        if "Unknown thread id" not in str(exc):
                            raise
    finally:
        run.stop.set()
        for t in threads:
            t.join()
        proxy.close()
    asyncio.run(connkill.drain(run))
    single.close()
    checker_conn.close()
    admin.close()
    assert not errors, errors
    _report("connection kills mysql", connkill.figures(run, kills))


# -- the judges themselves ------------------------------------------------------------------


def test_whole_tells_a_torn_transcript_from_a_whole_one() -> None:
    from tests.faults.workload import transcript, whole

    full = transcript("w", 3)
    assert whole(full) == ("w", 3)
    assert whole(full[:-1]) is None
    assert whole([*transcript("w", 2)[:-1], full[-1]]) is None
    assert whole([]) == ("", 0)


def test_the_ledger_counts_what_the_contract_forbids() -> None:
    """Each figure the suite requires to be 0 does count its fault."""
    from storetest.contract import OutcomeUnknown, StoreError
    from tests.faults.workload import SteerLedger

    ledger = SteerLedger()
    for text in ("a:1", "a:2", "a:3", "a:4"):
        ledger.added(text, None)
    ledger.added("a:5", StoreError("add_steer to session 'q' failed: x"))
    ledger.added("a:6", OutcomeUnknown("add_steer to session 'q' may or may not ...: x"))
    ledger.added("a:6", None)  # the retry: a:6 may now be queued twice
    ledger.took(None, OutcomeUnknown("take_steers ...", steers=["a:3"]))
    ledger.took(["a:2", "a:1"], None)  # out of order
    ledger.took(["a:2", "a:5", "a:6", "a:6"], None)  # a:2 twice; a:5 failed to add
    figures = ledger.verdict()
    assert figures["reordered"] == 1
    assert figures["duplicated"] == 1
    assert figures["unexpected"] == 1
    assert figures["lost"] == 1  # a:4; a:3 may have gone with the unknown take
    assert figures["duplicated after OutcomeUnknown retries"] == 1
