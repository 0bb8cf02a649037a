"""Issue 32: every call of a server store ends within its bound on a stalled network.

A proxy that forwards nothing and resets nothing (``CuttingProxy.stall``) holds every
connection of the store under test; each call must end within the bound plus 1 s, with
``StoreError`` when the stall began before a statement, or ``OutcomeUnknown`` when it
began right after COMMIT went up (the server commits; its answer waits), and the same
handle must work once the network does. The stall lasts until every call has ended, or
``STALL_AT_MOST`` seconds: longer than twice the bound, so a store that waits out the
stall (or its bound twice) is seen to.

Postgres stores get their bound from ``timeout=``; the MySQL store from the connection's
``read_timeout``/``write_timeout``, and warns when a connection has none.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
import warnings
from collections.abc import Awaitable, Callable
from contextlib import closing
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from storetest.contract import Message, OutcomeUnknown, StoreError
from storetest.entries import Entry
from tests.faults.proxy import MYSQL_COMMIT, POSTGRES_COMMIT, CuttingProxy

BOUND = 1.5
SLACK = 1.0  # what the issue allows past the bound
STALL_AT_MOST = 3 * BOUND + 1

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _proxy_for(url: str) -> tuple[CuttingProxy, str]:
    parts = urlsplit(url)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return proxy, urlunsplit((parts.scheme, f"{userinfo}127.0.0.1:{proxy.port}", parts.path, "", ""))


def _judge(ended: dict[str, tuple[float, BaseException | None]], expected: type[BaseException]) -> list[str]:
    """Problems with calls that should each have raised ``expected`` within the bound
    (having waited for it: the stall was real)."""
    problems = []
    for name, (took, exc) in ended.items():
        if type(exc) is not expected:
            problems.append(f"{name}: raised {exc!r}, not {expected.__name__}")
        if not BOUND - 0.1 <= took <= BOUND + SLACK:
            problems.append(f"{name}: ended after {took:.2f} s (bound {BOUND} s, allowed {BOUND + SLACK} s)")
    return problems


# PostgreSQL: the transcript store and the log store -----------------------------------


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, BaseException | None]:
    start = time.monotonic()
    try:
        await call()
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None


@pytest.mark.parametrize("where", ["before a statement", "at COMMIT"])
def test_postgres_calls_end_within_their_bound(storetest_postgres_url: str, where: str) -> None:
    """save, messages, add_steer, take_steers and a log append, each stalled: each ends
    within ``timeout`` + 1 s; then the same handles work."""
    asyncpg = pytest.importorskip("asyncpg")
    from reference_stores import postgres, postgres_log

    proxy, proxied = _proxy_for(storetest_postgres_url)
    s = f"stall-{secrets.token_hex(4)}"

    async def main() -> list[str]:
        direct = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        async with direct.acquire() as conn:
            await conn.execute(postgres.SCHEMA)
            await conn.execute(postgres_log.SCHEMA)
        pool = await asyncpg.create_pool(proxied, min_size=5, max_size=5)
        store = postgres.PostgresStore(pool, timeout=BOUND)
        log = postgres_log.PostgresLogStore(pool, timeout=BOUND)
        checker = postgres.PostgresStore(direct)
        n = 0

        def calls() -> dict[str, Callable[[], Awaitable[Any]]]:
            nonlocal n
            n += 1
            return {
                "save": lambda: store.save(s, [Message.text("user", f"m{n}")]),
                "messages": lambda: store.messages(s),
                "add_steer": lambda: store.add_steer(s, f"steer {n}"),
                "take_steers": lambda: store.take_steers(s),
                "append": lambda: log.append(s, [Entry.message(f"e{n}", None, T0, Message.text("user", "x"))]),
            }

        try:
            for call in calls().values():  # every statement prepared on every connection
                await asyncio.gather(*(call() for _ in range(5)), return_exceptions=True)
            problems: list[str] = []
            if where == "before a statement":
                await checker.add_steer(s, "queued")  # so the take has a transaction to begin
                proxy.stall()
                watchdog = asyncio.get_running_loop().call_later(STALL_AT_MOST, proxy.resume)
                named = calls()
                ended = dict(zip(named, await asyncio.gather(*(_timed(c) for c in named.values())), strict=True))
                watchdog.cancel()
                proxy.resume()
                # The log append is one autocommitted statement: the statement unanswered
                # is its commit unanswered, so its outcome is unknown.
                appended = {"append": ended.pop("append")}
                problems += _judge(ended, StoreError) + _judge(appended, OutcomeUnknown)
            else:
                for name, call in calls().items():
                    if name in ("messages", "append"):
                        continue  # a read commits nothing; an append sends no COMMIT (above)
                    await checker.add_steer(s, "queued")
                    proxy.stall_after_commit(POSTGRES_COMMIT)
                    watchdog = asyncio.get_running_loop().call_later(STALL_AT_MOST, proxy.resume)
                    ended = {name: await _timed(call)}
                    watchdog.cancel()
                    proxy.resume()
                    problems += _judge(ended, OutcomeUnknown)
            # The same handles, once the network works again.
            await store.save(s, [Message.text("user", "after")])
            if await store.messages(s) != [Message.text("user", "after")]:
                problems.append("a save after the stall did not read back")
            await store.take_steers(s)
            await store.add_steer(s, "after")
            if await store.take_steers(s) != ["after"]:
                problems.append("add and take after the stall did not round-trip")
            after = Entry.message("after", None, T0, Message.text("user", "after"))
            await log.append(s, [after])
            if (await log.entries(s))[-1:] != [after]:
                problems.append("a log append after the stall did not read back")
            return problems
        finally:
            proxy.resume()
            pool.terminate()
            await direct.close()
            proxy.close()

    problems = asyncio.run(main())
    assert not problems, problems


def test_postgres_stores_refuse_a_bad_timeout() -> None:
    pytest.importorskip("asyncpg")
    from reference_stores.postgres import PostgresStore
    from reference_stores.postgres_log import PostgresLogStore

    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout must be a positive, finite number of seconds"):
            PostgresStore(object(), timeout=bad)
        with pytest.raises(ValueError, match="timeout must be a positive"):
            PostgresLogStore(object(), timeout=bad)
    with pytest.raises(TypeError, match="timeout must be a number of seconds, not str"):
        PostgresStore(object(), timeout="30")  # type: ignore[arg-type]


# MariaDB: the bound is the connection's read_timeout/write_timeout ---------------------


def _mysql_db(url: str) -> str:
    from reference_stores.mysql import SCHEMA
    from storetest._engine.servers.mysql import connect

    with closing(connect(url)) as conn, conn.cursor() as cur:
        for statement in SCHEMA:
            cur.execute(statement)
        conn.commit()
    return url


@pytest.mark.parametrize("where", ["before a statement", "at COMMIT"])
def test_mysql_calls_end_within_the_connections_timeouts(storetest_mysql_url: str, where: str) -> None:
    """save, messages, add_steer and take_steers on stores given a connection with
    ``read_timeout``/``write_timeout`` of the bound, each stalled: each ends within
    the bound + 1 s; then the same handles work (reconnecting)."""
    pytest.importorskip("pymysql")
    from reference_stores.mysql import MySQLStore
    from storetest._engine.servers.mysql import connect

    url = _mysql_db(storetest_mysql_url)
    proxy, proxied = _proxy_for(url)
    s = f"stall-{secrets.token_hex(4)}"
    checker = MySQLStore(connect(url))
    names = ["save", "messages", "add_steer", "take_steers"]
    # One store per call, so that the calls stall side by side, not one after another.
    stores = {n: MySQLStore(connect(proxied, read_timeout=BOUND, write_timeout=BOUND)) for n in names}

    def call(name: str, store: Any, n: int) -> Any:
        if name == "save":
            return store.save(s, [Message.text("user", f"m{n}")])
        if name == "messages":
            return store.messages(s)
        if name == "add_steer":
            return store.add_steer(s, f"steer {n}")
        return store.take_steers(s)

    def timed(name: str, ended: dict[str, tuple[float, BaseException | None]]) -> None:
        start = time.monotonic()
        try:
            call(name, stores[name], 2)
        except Exception as exc:
            ended[name] = (time.monotonic() - start, exc)
        else:
            ended[name] = (time.monotonic() - start, None)

    problems: list[str] = []
    try:
        for name in names:
            call(name, stores[name], 1)
        checker.add_steer(s, "queued")
        ended: dict[str, tuple[float, BaseException | None]] = {}
        if where == "before a statement":
            proxy.stall()
            watchdog = threading.Timer(STALL_AT_MOST, proxy.resume)
            watchdog.start()
            threads = [threading.Thread(target=timed, args=(n, ended)) for n in names]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            watchdog.cancel()
            proxy.resume()
            problems += _judge(ended, StoreError)
        else:
            for name in names:
                if name == "messages":
                    continue
                checker.add_steer(s, "queued")
                proxy.stall_after_commit(MYSQL_COMMIT)
                watchdog = threading.Timer(STALL_AT_MOST, proxy.resume)
                watchdog.start()
                timed(name, ended)
                watchdog.cancel()
                proxy.resume()
            problems += _judge(ended, OutcomeUnknown)
        for name, store in stores.items():
            store.save(f"{s}-{name}", [Message.text("user", "after")])
            if store.messages(f"{s}-{name}") != [Message.text("user", "after")]:
                problems.append(f"the {name} store: a save after the stall did not read back")
            store.add_steer(f"{s}-{name}", "after")
            if store.take_steers(f"{s}-{name}") != ["after"]:
                problems.append(f"the {name} store: add and take after the stall did not round-trip")
    finally:
        proxy.resume()
        proxy.close()
    assert not problems, problems


def test_mysql_store_warns_about_a_connection_without_timeouts(storetest_mysql_url: str) -> None:
    """Only the connection can bound a pymysql call: a store given one without
    ``read_timeout``/``write_timeout`` says so, at construction or, for a factory, at
    its first such connection, and once."""
    pytest.importorskip("pymysql")
    from reference_stores.mysql import MySQLStore, UnboundedCalls
    from storetest._engine.servers.mysql import connect

    url = _mysql_db(storetest_mysql_url)
    with closing(connect(url, read_timeout=None)) as conn:
        with pytest.warns(UnboundedCalls, match="has no read_timeout: a call on a stalled network"):
            MySQLStore(conn)
    with pytest.warns(UnboundedCalls, match="has no read_timeout and no write_timeout"):
        factory = MySQLStore(lambda: connect(url, read_timeout=None, write_timeout=None))
        factory.messages("s")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnboundedCalls)
        factory.messages("s")  # warned once already
        with closing(connect(url)) as conn:
            MySQLStore(conn).messages("s")  # mysql_connection gives both
