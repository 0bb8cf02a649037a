"""The Redis log store's own promises, beyond the conformance suite: the clients it
refuses and the ones it warns about, its keys (one slot per session, no two sessions
sharing one), values at the edges, errors that name the session, and calls that end
within the socket timeouts on a stalled connection."""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

from storetest.contract import Message, OutcomeUnknown, StoreError
from storetest.entries import Entry
from tests.faults.resp import RespProxy
from tests.test_log_stores import EDGE_ENTRIES

aioredis = pytest.importorskip("redis.asyncio")

from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.cluster import key_slot  # noqa: E402

from reference_stores.redis import RedisStore, session_key  # noqa: E402
from reference_stores.redis_log import RedisLogStore  # noqa: E402

T = TypeVar("T")
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
NO_RETRY = Retry(NoBackoff(), 0)


def run(main: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(main())  # type: ignore[arg-type]


def msg(entry_id: str, parent: str | None = None) -> Entry:
    return Entry.message(entry_id, parent, T0, Message.text("user", entry_id))


def client(url: str, **settings: Any) -> Any:
    return aioredis.Redis.from_url(url, **{"retry": NO_RETRY, "socket_timeout": 5, "socket_connect_timeout": 5,
                                           **settings})


STORES = pytest.mark.parametrize("store", [RedisStore, RedisLogStore], ids=["transcript", "log"])


@STORES
def test_clients_it_cannot_work_with_are_refused_naming_the_fix(store: type) -> None:
    with pytest.raises(ValueError, match="without decode_responses"):
        store(aioredis.Redis(decode_responses=True, retry=NO_RETRY))
    with pytest.raises(ValueError, match=r"does not retry commands .*NoBackoff\(\), 0\)"):
        store(aioredis.Redis())  # Redis() retries 10 times by default
    with pytest.raises(ValueError, match="retries 1 times"):
        store(aioredis.Redis.from_url("redis://127.0.0.1:1/0", retry_on_error=[ConnectionError]))
    with pytest.raises(ValueError, match=r"does not retry commands \(this one retries \d+ times"):
        store(aioredis.RedisCluster(host="127.0.0.1", port=1))  # RedisCluster retries 3 times by default
    with pytest.raises(TypeError, match="not a URL"):
        store("redis://127.0.0.1:6379")
    with pytest.raises(ValueError, match="prefix must be a str without"):
        store(aioredis.Redis(retry=NO_RETRY), prefix="app:{x}:")


@STORES
def test_a_client_that_may_wait_forever_is_warned_about(store: type) -> None:
    # Redis.from_url leaves both socket timeouts None, unlike Redis(): the common case.
    with pytest.warns(RuntimeWarning, match=f"{store.__name__}: the client's socket_timeout and "
                      "socket_connect_timeout are None"):
        store(aioredis.Redis.from_url("redis://127.0.0.1:1/0", retry=NO_RETRY))
    with pytest.warns(RuntimeWarning, match="socket_connect_timeout is None"):
        store(aioredis.Redis(retry=NO_RETRY, socket_timeout=5, socket_connect_timeout=None))
    with pytest.warns(RuntimeWarning, match="socket_timeout is None"):
        store(aioredis.RedisCluster(host="127.0.0.1", port=1, retry=NO_RETRY, socket_timeout=None,
                                    socket_connect_timeout=5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store(aioredis.Redis(retry=NO_RETRY, socket_timeout=5, socket_connect_timeout=5))
        store(aioredis.Redis.from_url("redis://127.0.0.1:1/0?socket_timeout=1&socket_connect_timeout=1"))



KINDS = ("e", "i", "v", "d", "m", "s")  # the log store's, then the transcript store's


def test_keys_of_a_session_share_a_slot_and_no_two_sessions_share_a_key() -> None:
    sessions = ["x", "x:e", "x}:e", "}x", "{a}", "{", "}", "a}{b", "%7B", "%", "\x00", "é", "e\u0301"]
    keys = {s: [session_key("p:", s, kind) for kind in KINDS] for s in sessions}
    for session, of_session in keys.items():
        assert len({key_slot(k) for k in of_session}) == 1, f"{session!r}: {of_session}"
    every = [k for of_session in keys.values() for k in of_session]
    assert len(set(every)) == len(every)


def test_the_store_writes_two_keys_per_session_under_its_prefix(
    storetest_redis_url: str, storetest_redis_prefix: str
) -> None:
    prefix = f"{storetest_redis_prefix}{secrets.token_hex(3)}:"

    async def main() -> list[bytes]:
        c = client(storetest_redis_url)
        try:
            store = RedisLogStore(c, prefix=prefix)
            await store.append("x", [msg("a")])
            await store.append("x:log", [msg("a")])
            assert await store.create("}x", [msg("b")])
            return sorted([k async for k in c.scan_iter(match=f"{prefix}*")])
        finally:
            await c.aclose()

    assert run(main) == sorted(session_key(prefix, s, kind) for s in ("x", "x:log", "}x") for kind in ("e", "i"))


def test_values_at_the_edges_come_back_exactly(storetest_redis_url: str, storetest_redis_prefix: str) -> None:
    edge = list(EDGE_ENTRIES)

    async def main() -> tuple[list[Entry], list[Entry]]:
        c = client(storetest_redis_url)
        try:
            store = RedisLogStore(c, prefix=storetest_redis_prefix)
            session = f"s\x00{secrets.token_hex(4)}"
            await store.append(session, edge)
            return await store.entries(session), await store.entries(session.replace("\x00", ""))
        finally:
            await c.aclose()

    assert run(main) == (edge, [])


def test_a_write_whose_connection_never_opened_is_a_plain_store_error() -> None:
    """Nothing listens: refused before anything is sent, so not OutcomeUnknown."""

    async def main() -> list[BaseException]:
        gone = client("redis://127.0.0.1:1/0")
        log, store = RedisLogStore(gone), RedisStore(gone)
        raised = []
        for call in (lambda: log.append("gone", [msg("a")]), lambda: log.create("gone", [msg("a")]),
                     lambda: store.save("gone", [Message.text("user", "x")]), lambda: store.add_steer("gone", "s"),
                     lambda: store.take_steers("gone"), lambda: log.entries("gone")):
            with pytest.raises(StoreError) as caught:
                await call()
            raised.append(caught.value)
        return raised

    for exc in run(main):
        assert not isinstance(exc, OutcomeUnknown), exc
        assert "session 'gone' failed: Error 111 connecting" in str(exc), exc


def test_errors_name_the_operation_the_session_and_the_cause(
    storetest_redis_url: str, storetest_redis_prefix: str
) -> None:
    async def main() -> None:
        c = client(storetest_redis_url)
        try:
            store = RedisLogStore(c, prefix=storetest_redis_prefix)
            session = f"corrupt-{secrets.token_hex(3)}"
            await store.append(session, [msg("a")])
            await c.rpush(session_key(storetest_redis_prefix, session, "e"), b"not json")
            with pytest.raises(StoreError, match=f"read of session '{session}' failed: key .*:e' holds an element "
                               r"\(2 of 2\) that is not an entry"):
                await store.entries(session)
        finally:
            await c.aclose()

    run(main)


#: The socket timeouts of the stalled-connection test, and the bound the store documents.
TIMEOUT = 0.3
BOUND = 2 * (TIMEOUT + TIMEOUT)


def _calls(store: Any, session: str) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    if isinstance(store, RedisLogStore):
        return [("append", lambda: store.append(session, [msg(secrets.token_hex(4))])),
                ("create", lambda: store.create(f"{session}-{secrets.token_hex(4)}", [msg("a")])),
                ("entries", lambda: store.entries(session))]
    return [("save", lambda: store.save(session, [Message.text("user", "x")] * 3)),
            ("messages", lambda: store.messages(session)),
            ("add_steer", lambda: store.add_steer(session, "s")),
            ("take_steers", lambda: store.take_steers(session))]


@STORES
def test_calls_on_a_stalled_connection_end_within_the_socket_timeouts(
    store: type, storetest_redis_url: str, storetest_redis_prefix: str
) -> None:
    """A proxy that stops forwarding (and resets nothing): on a connection already in
    use and on a new one, every call fails within 2 x (connect + socket timeout)."""
    parts = urlsplit(storetest_redis_url)
    proxy = RespProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    url = parts._replace(netloc=f"127.0.0.1:{proxy.port}").geturl()
    session = f"stall-{secrets.token_hex(3)}"

    async def timed(call: Awaitable[Any]) -> tuple[float, BaseException | None]:
        started = time.monotonic()
        try:
            # A backstop, so that a store that waits forever fails here rather than hangs.
            await asyncio.wait_for(call, BOUND + 5)
        except Exception as exc:
            return time.monotonic() - started, exc
        return time.monotonic() - started, None

    async def main() -> list[tuple[str, float, BaseException | None]]:
        clients = [client(url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT) for _ in range(2)]
        try:
            stores = [store(c, prefix=storetest_redis_prefix) for c in clients]
            for _, call in _calls(stores[0], session):
                await call()  # the connection is open, each script loaded, and back in the pool
            proxy.stall()
            results = []
            for name, call in _calls(stores[0], session):
                elapsed, exc = await timed(call())
                results.append((name, elapsed, exc))
            name, call = _calls(stores[1], session)[-1]  # a new connection, stalled from the start
            elapsed, exc = await timed(call())
            return [*results, (f"{name} on a new connection", elapsed, exc)]
        finally:
            proxy.stall(False)
            proxy.close()
            for c in clients:
                await c.aclose()

    results = run(main)
    sys.stdout.write(", ".join(f"{name} {elapsed:.2f} s" for name, elapsed, _ in results) + "\n")
    for name, elapsed, exc in results:
        assert isinstance(exc, StoreError), f"{name}: {exc!r} after {elapsed:.2f} s"
        assert elapsed < BOUND, f"{name} took {elapsed:.2f} s; the bound is {BOUND:.2f} s"
        assert session in str(exc) and "Timeout" in str(exc), f"{name}: {exc}"
