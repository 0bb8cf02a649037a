"""The fault suite on Redis: connections of the Redis stores cut by a RESP-aware proxy
(:mod:`tests.faults.resp`) before a command, after a write was sent and before its
reply, and in the middle of a reply, ``STORETEST_FAULT_CONNECTION_KILLS`` times per
store (see ``test_faults_sqlite.py`` for what is asserted, and
:mod:`tests.faults.logconn` for the log store's accounting). Each asserts too that
``OutcomeUnknown`` is raised exactly by the calls whose write had been sent when their
connection was cut, and that every failure was caused by a cut. Then a private server
(AOF ``always``) restarted under three processes, and the network stalled past the
stores' bound (``tests/faults/restart.py``, ``connkill.stall_twice``)."""

from __future__ import annotations

import asyncio
import random
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.faults import connkill, logconn, restart
from tests.faults.proxy import REDIS_EXEC, REDIS_WRITES, CuttingProxy
from tests.faults.resp import RespProxy
from tests.faults.servers import PrivateServer, skip_unless_private
from tests.faults.settings import CONNECTION_KILLS, SEED, report

aioredis = pytest.importorskip("redis.asyncio")

from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402

from reference_stores.redis import RedisStore, session_key  # noqa: E402
from reference_stores.redis_log import RedisLogStore  # noqa: E402


def _client(url: str) -> Any:
    return aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), socket_timeout=5, socket_connect_timeout=5)


def _proxied(url: str, proxy: RespProxy) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()


@asynccontextmanager
async def _through_proxy(url: str, make: Callable[[Any], Any]) -> AsyncIterator[tuple[RespProxy, list[Any], Any]]:
    """A proxy to the server, two stores through it, and a client straight to the server."""
    parts = urlsplit(url)
    proxy = RespProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    clients = [_client(_proxied(url, proxy)) for _ in range(2)]
    direct = _client(url)
    try:
        yield proxy, [make(c) for c in clients], direct
    finally:
        for c in [*clients, direct]:
            await c.aclose()
        proxy.close()


async def _work_while(
    run: connkill.Run, workers: list[Callable[[], Awaitable[None]]], cutting: Awaitable[None]
) -> None:
    """Run the workers until ``cutting`` is done, then stop them (and let them finish)."""
    tasks = [asyncio.ensure_future(w()) for w in workers]
    try:
        await cutting
        run.stop.set()
        await asyncio.gather(*tasks)
    finally:
        run.stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_redis_log_connections_cut_at_random_points(storetest_redis_url: str, storetest_redis_prefix: str) -> None:
    """Appends and reads of two RedisLogStore handles, their connections cut before the
    script or the read, after the script was sent, and in the middle of a reply."""
    rng = random.Random(SEED)
    sessions = [f"conn-{secrets.token_hex(3)}-{i}" for i in range(2)]

    async def main() -> dict[str, Any]:
        async with _through_proxy(storetest_redis_url, lambda c: RedisLogStore(c, prefix=storetest_redis_prefix)) as (
            proxy, stores, direct
        ):
            run = logconn.LogRun(checker=None)
            cutting = logconn.cut_at_random(proxy, rng, CONNECTION_KILLS, [b"EVALSHA", b"LRANGE"])
            await _work_while(run, logconn.workers(run, stores, sessions, SEED), cutting)
            figures = logconn.cut_figures(run, proxy, lambda name, _: "write" if name == b"EVALSHA" else "read")
            figures.update(await logconn.final_figures(run, RedisLogStore(direct, prefix=storetest_redis_prefix)))
            # The handles work again after all those cuts.
            for i, store in enumerate(stores):
                await store.append(sessions[0], logconn.batch(f"end{i}", 1, 2))
            return figures

    report("connection cuts redis log", asyncio.run(main()))


def test_redis_connections_cut_at_random_points(storetest_redis_url: str, storetest_redis_prefix: str) -> None:
    """Saves, reads, adds and takes of two RedisStore handles, their connections cut
    before a script, RPUSH or a read's EXEC, after it was sent, and in the middle of its
    reply. A take
    whose reply is lost reads back what it took (its receipt): it returns, or raises
    StoreError if it took nothing."""
    rng = random.Random(SEED)
    sessions = [f"conn-{secrets.token_hex(3)}-{i}" for i in range(2)]

    async def main() -> dict[str, Any]:
        async with _through_proxy(storetest_redis_url, lambda c: RedisStore(c, prefix=storetest_redis_prefix)) as (
            proxy, stores, direct
        ):
            store = stores[0]

            def kind_of(name: bytes, arg: bytes) -> logconn.Kind:
                if name == b"RPUSH" or arg == store._save.sha.encode():
                    return "write"
                # A take reads back what it took; the rest read (a read is a MULTI/EXEC).
                return "recovered" if arg == store._take.sha.encode() else "read"

            run = connkill.Run(checker=RedisStore(direct, prefix=storetest_redis_prefix, cache_sessions=0))
            # Never the read-back of a take's receipt: a take whose reply and read-back
            # are both lost loses its steers (the store's docstring says so).
            cutting = logconn.cut_at_random(proxy, rng, CONNECTION_KILLS, [b"EVALSHA", b"RPUSH", b"EXEC"],
                                            spare=[store._claim.sha.encode()])
            await _work_while(run, connkill.workers(run, stores, sessions), cutting)
            await connkill.drain(run)
            figures = logconn.cut_figures(run, proxy, kind_of)
            # The handles work again after all those cuts.
            for handle in stores:
                await handle.save(sessions[0], [])
            return {**figures, **connkill.figures(run, {})}

    report("connection cuts redis", asyncio.run(main()))


def test_a_take_arriving_after_its_receipt_was_read_back_takes_nothing(
    storetest_redis_url: str, storetest_redis_prefix: str
) -> None:
    """The read-back of a lost take's receipt marks it: the take, if it reaches the
    server only then (a late packet), leaves the steers queued for the next take."""
    session = f"late-{secrets.token_hex(3)}"

    async def main() -> tuple[list[bytes], list[bytes], list[str]]:
        client = _client(storetest_redis_url)
        try:
            store = RedisStore(client, prefix=storetest_redis_prefix)
            await store.add_steer(session, "s1")
            steers, receipt = (session_key(storetest_redis_prefix, session, k) for k in ("s", "rlate"))
            claimed = await store._claim(keys=[receipt], args=[60])
            late = await store._take(keys=[steers, receipt], args=[60])
            return claimed, late, await store.take_steers(session)
        finally:
            await client.aclose()

    assert asyncio.run(main()) == ([], [], ["s1"])


# Server restarts and stalls (issue 33) ---------------------------------------------

#: The clients' socket_timeout and socket_connect_timeout in these tests.
SOCKET_TIMEOUT, CONNECT_TIMEOUT = 0.5, 0.25
#: The stores' bound on such a client (their module docstring): 2 x (connect + reply).
BOUND = 2 * (CONNECT_TIMEOUT + SOCKET_TIMEOUT)
RESTART_PREFIX = "restart:"


def _bounded_client(url: str) -> Any:
    return aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), socket_timeout=SOCKET_TIMEOUT,
                                   socket_connect_timeout=CONNECT_TIMEOUT)


def _redis_ready(url: str) -> bool:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _receipts(url: str, prefix: str, session: str) -> list[list[str]]:
    """Every take receipt of ``session`` still holding steers (see restart.account_stranded)."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=10)
    try:
        found = []
        for key in client.scan_iter(match=session_key(prefix, session, "r") + b"*", count=1000):
            if client.type(key) == b"list":
                found.append([bytes(s).decode() for s in client.lrange(key, 0, -1)])
        return found
    finally:
        client.close()


def test_redis_restarted_under_a_workload_of_several_processes() -> None:
    """SIGTERM, SHUTDOWN NOSAVE and SIGKILL of a private server with AOF ``always``,
    down 2 s each, under savers, adders, takers and log appenders in three processes:
    nothing lost, duplicated, torn or landed after failing; every call inside an outage
    fails within the bound; every handle works afterwards."""
    skip_unless_private("redis")
    server = PrivateServer("redis", _redis_ready)
    proxy = CuttingProxy("127.0.0.1", int(server.url.rsplit(":", 1)[1].split("/")[0]))
    proxied = _proxied(server.url, proxy)

    async def open_stores() -> dict[str, Any]:
        client = _bounded_client(proxied)
        return {"store": RedisStore(client, prefix=RESTART_PREFIX),
                "log": RedisLogStore(client, prefix=RESTART_PREFIX)}

    async def _drain() -> list[str]:
        client = _client(server.url)
        try:
            store, taken = RedisStore(client, prefix=RESTART_PREFIX), []
            while got := await store.take_steers(restart.QUEUE):
                taken += got
            return taken
        finally:
            await client.aclose()

    async def _log(session: str) -> list[str]:
        client = _client(server.url)
        try:
            return [e.id for e in await RedisLogStore(client, prefix=RESTART_PREFIX).entries(session)]
        finally:
            await client.aclose()

    try:
        figures = restart.run(
            server, proxy, REDIS_WRITES, open_stores, lambda: asyncio.run(_drain()),
            lambda s: asyncio.run(_log(s)), ["fast", "immediate", "SIGKILL"], BOUND, "a write",
            lambda: _receipts(server.url, RESTART_PREFIX, restart.QUEUE),
        )
    finally:
        proxy.close()
        server.close()
    report("restarts redis", figures)


def test_redis_connections_stalled_past_the_bound(storetest_redis_url: str, storetest_redis_prefix: str) -> None:
    """The network stalled (forwarding nothing, resetting nothing) for longer than the
    stores' bound, before a command, right after a write (a script or RPUSH) went up,
    and right after a read's EXEC went up, under savers, adders, takers, log appenders
    and log readers on two handles of each store: every call ends within the bound +
    1 s, nothing is lost, duplicated or torn, and the same handles work once the
    network does."""
    parts = urlsplit(storetest_redis_url)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    # Its own: the cut test's receipts (same queue name) stay on the server a minute.
    prefix = f"{storetest_redis_prefix}stall{secrets.token_hex(3)}:"

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        clients = [_bounded_client(_proxied(storetest_redis_url, proxy)) for _ in range(2)]
        direct = _client(storetest_redis_url)
        run = connkill.Run(checker=RedisStore(direct, prefix=prefix, cache_sessions=0))
        log_run = logconn.LogRun(checker=None)
        sessions = [f"stall-{secrets.token_hex(3)}-{i}" for i in range(2)]
        stores = [RedisStore(c, prefix=prefix) for c in clients]
        logs = [RedisLogStore(c, prefix=prefix) for c in clients]
        tasks = [asyncio.ensure_future(w()) for w in connkill.workers(run, stores, sessions)]
        tasks += [asyncio.ensure_future(w()) for w in logconn.workers(log_run, logs, sessions, SEED)]
        try:
            windows = await connkill.stall_twice(proxy, REDIS_WRITES, BOUND + 1, [
                ("before a command", None), ("at a write", REDIS_WRITES), ("at EXEC", REDIS_EXEC)])
            run.stop.set()
            log_run.stop.set()
            await asyncio.gather(*tasks)
            await logconn.handles_work_after(run, stores, logs, sessions[0])
            await connkill.drain(run)
            log_figures = await logconn.final_figures(log_run, RedisLogStore(direct, prefix=prefix))
        finally:
            run.stop.set()
            log_run.stop.set()
            proxy.resume()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for c in [*clients, direct]:
                await c.aclose()
            proxy.close()
        stranded = restart.account_stranded(run.ledger, _receipts(storetest_redis_url, prefix, connkill.QUEUE),
                                            run.problems)
        return ({"stalls": connkill.stall_rows(run, windows, BOUND), **connkill.figures(run, Counter()), **stranded},
                {"stalls": connkill.stall_rows(log_run, windows, BOUND), **log_figures})

    figures, log_figures = asyncio.run(main())
    report("stalls redis", figures)
    report("stalls redis log", log_figures)
