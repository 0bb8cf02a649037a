"""The Redis store's own promises, beyond the conformance suite: what it refuses at
construction, keys that keep a session in one hash slot whatever its id, a take, a
read and a last writer's save in one round trip each, and saves that encode only what
changed across two handles on a cluster."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

redis = pytest.importorskip("redis")

from redis.asyncio import Redis, RedisCluster  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.cluster import key_slot  # noqa: E402
from redis.retry import Retry  # noqa: E402

from reference_stores.redis import RedisStore, session_key  # noqa: E402
from storetest import StoreError  # noqa: E402
from storetest._engine.servers import LocalServer  # noqa: E402
from storetest._engine.servers import redis as redis_databases  # noqa: E402
from storetest.codec import CodecError, decode_trusted  # noqa: E402
from storetest.contract import Message, Text, ToolCall, ToolResult  # noqa: E402
from tests.test_incremental import Counted, conversation  # noqa: E402

ODD_IDS = ["x", "x:messages", "}x", "{a}", "a{b}c", "{", "}", "{}", "%7D", "%", "X", "x ", "é", "e\u0301", "a\x00b"]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(monkeypatch)


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[LocalServer]:
    """A server of this test's own, so counted commands are this test's only."""
    if redis_databases.find_redis_server() is None:
        pytest.skip("redis-server is not installed here")
    server = redis_databases.start_server(tmp_path / "server")
    try:
        yield server
    finally:
        try:
            os.kill(server.pid, signal.SIGTERM)
            os.waitpid(server.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass  # the test killed it


def run(work: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(work())  # type: ignore[arg-type]


def test_a_url_is_refused_naming_the_fix() -> None:
    with pytest.raises(TypeError, match=r"not a URL: pass redis.asyncio.Redis.from_url\(url\)"):
        RedisStore("redis://127.0.0.1:6379/0")


def test_a_synchronous_client_is_refused() -> None:
    with pytest.raises(TypeError, match=r"synchronous: make it with redis\.asyncio"):
        RedisStore(redis.Redis())


def test_a_decoding_client_is_refused() -> None:
    with pytest.raises(ValueError, match="decode_responses=True"):
        RedisStore(Redis(decode_responses=True))


def test_a_prefix_with_a_brace_is_refused() -> None:
    with pytest.raises(ValueError, match="hash tag must be the session id"):
        RedisStore(Redis(retry=Retry(NoBackoff(), 0)), prefix="app:{tenant}:")


def test_every_key_of_a_session_is_in_one_slot_and_no_two_sessions_share_a_key() -> None:
    seen: dict[bytes, str] = {}
    for session in ODD_IDS:
        keys = [session_key("app:", session, kind) for kind in "vdms"]
        assert len({key_slot(k) for k in keys}) == 1, (session, keys)
        for key in keys:
            assert key not in seen, f"{session!r} and {seen[key]!r} share the key {key!r}"
            seen[key] = session


async def _cluster_store(url: str, prefix: str) -> AsyncIterator[RedisStore]:
    client = RedisCluster.from_url(url, retry=Retry(NoBackoff(), 0))
    try:
        yield RedisStore(client, prefix=prefix)
    finally:
        await client.aclose()


def test_odd_ids_are_sessions_of_their_own_on_the_cluster(
    storetest_redis_cluster_url: str, storetest_redis_prefix: str
) -> None:
    async def main() -> None:
        async for store in _cluster_store(storetest_redis_cluster_url, storetest_redis_prefix + "odd:"):
            for session in ODD_IDS:
                await store.save(session, [Message.text("user", session)])
                await store.add_steer(session, f"steer {session}")
            for session in ODD_IDS:
                assert await store.messages(session) == [Message.text("user", session)], session
                assert await store.take_steers(session) == [f"steer {session}"], session

    run(main)


def test_a_read_a_last_writers_save_and_an_empty_take_are_one_round_trip_each(
    private_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every request redis-py writes (a command, or a whole MULTI/EXEC pipeline) is one
    # send_packed_command call, answered before the next: one round trip each.
    from redis.asyncio.connection import Connection

    sent: list[bytes] = []
    send = Connection.send_packed_command

    async def counting(self: Any, command: Any, check_health: bool = True) -> None:
        packed = command if isinstance(command, (bytes, str, memoryview)) else b"".join(command)
        sent.append(bytes(packed).split(b"\r\n")[2])  # the first command's name
        await send(self, command, check_health)

    async def main() -> None:
        client = Redis.from_url(private_server.url)
        store = RedisStore(client)
        conv = conversation(30)
        # Warm up: each script is loaded once per server (NOSCRIPT, then SCRIPT LOAD).
        await store.save("warm", conv[:1])
        await store.messages("warm")
        await store.add_steer("warm", "w")
        await store.take_steers("warm")  # and its acknowledgement
        await store.save("s", conv[:10])
        await store.add_steer("s", "one")
        await store.add_steer("s", "two")
        monkeypatch.setattr(Connection, "send_packed_command", counting)

        async def requests(work: Awaitable[Any]) -> list[bytes]:
            sent.clear()
            await work
            return list(sent)

        # A take that took steers acknowledges its receipt: two round trips; an empty one, one.
        assert await requests(store.take_steers("s")) == [b"EVALSHA", b"EVALSHA"]
        assert await requests(store.take_steers("s")) == [b"EVALSHA"]  # empty
        assert await requests(store.save("s", conv[:11])) == [b"EVALSHA"]
        assert await requests(store.messages("s")) == [b"MULTI"]
        assert await requests(store.add_steer("s", "three")) == [b"RPUSH"]
        # Another handle wrote after the prefix this one keeps: still one round trip.
        other = RedisStore(client)
        await other.messages("s")
        await store.save("s", conv[:12])
        assert await requests(other.save("s", conv[:13])) == [b"EVALSHA"]
        assert await store.messages("s") == conv[:13]
        # It rewrote that prefix: refused once, with the digests the plan needs.
        edited = [Message.text("user", "edited"), *conv[1:13]]
        await store.save("s", edited)
        assert await requests(other.save("s", conv[:14])) == [b"EVALSHA", b"EVALSHA"]
        assert await store.messages("s") == conv[:14]
        await client.aclose()

    run(main)


def test_one_tool_call_or_result_is_an_element_read_without_json(private_server: LocalServer) -> None:
    """One tool call or one tool result is stored in a form of its own (lengths, then the
    raw strings), read back with no JSON; it starts with ``{`` but is no JSON, so a
    release reading it as codec JSON fails on it rather than misreading it."""
    transcript = [
        Message("assistant", (ToolCall("call:1", "look:up", '{"q": "a:b"}\x00é'),)),
        Message("tool", (ToolResult("call:1", "found:\x00 it"),)),
        Message("tool", (ToolResult("", "", is_error=True),)),
        Message("user", (ToolCall("", "", ""),)),
        Message("assistant", (ToolCall("c", "n", "{}"), Text("and text"))),
    ]

    async def main() -> None:
        client = Redis.from_url(private_server.url)
        await RedisStore(client).save("s", transcript)
        elements = await client.lrange(session_key("storetest:", "s", "m"), 0, -1)
        assert elements[:4] == [
            '{!assistant:6:7:call:1look:up{"q": "a:b"}\x00é'.encode(),
            b"{?tool:6:0:call:1found:\x00 it",
            b"{?tool:0:1:",
            b"{!user:0:0:",
        ]
        assert elements[4].startswith(b'{"role":"assistant"')
        for element in elements[:2]:
            with pytest.raises(CodecError):
                decode_trusted(element)
        assert await RedisStore(client).messages("s") == transcript
        await client.aclose()

    run(main)


def test_two_alternating_cluster_handles_encode_only_what_changed(
    storetest_redis_cluster_url: str, storetest_redis_prefix: str, counted: Counted
) -> None:
    async def main() -> None:
        one = RedisCluster.from_url(storetest_redis_cluster_url, retry=Retry(NoBackoff(), 0))
        two = RedisCluster.from_url(storetest_redis_cluster_url, retry=Retry(NoBackoff(), 0))
        prefix = storetest_redis_prefix + "alternate:"
        a, b = RedisStore(one, prefix=prefix), RedisStore(two, prefix=prefix)
        conv = conversation(160)
        await a.save("s", conv[:100])
        await b.messages("s")
        for n in range(101, 160):
            counted.reset()
            await (a if n % 2 else b).save("s", conv[:n])
            assert (counted.encoded, counted.hashed) <= (2, 2), (n, counted.encoded, counted.hashed)
        await b.save("s", conv[:50])  # a shrink, then an edit inside the prefix
        edited = [*conv[:20], Message.text("user", "edited"), *conv[21:50]]
        await a.save("s", edited)
        assert await b.messages("s") == edited == await RedisStore(one, prefix=prefix).messages("s")
        await one.aclose()
        await two.aclose()

    run(main)


def test_a_server_that_is_gone_is_a_store_error_naming_the_session(private_server: LocalServer) -> None:
    async def main() -> None:
        client = Redis.from_url(private_server.url, retry=Retry(NoBackoff(), 0))
        store = RedisStore(client)
        await store.save("s", conversation(2))
        os.kill(private_server.pid, signal.SIGKILL)
        os.waitpid(private_server.pid, 0)
        with pytest.raises(StoreError, match="read of session 's' failed"):
            await store.messages("s")
        await client.aclose()

    run(main)


def test_the_plain_broken_base_passes_on_the_cluster_what_its_cluster_variant_fails(
    request: pytest.FixtureRequest,
) -> None:
    """The control for the cross-slot variant: the same base with its keys in one hash
    tag passes on the cluster, so what the suite catches is the keys, not the base."""
    from tests.broken_stores import BrokenStore, run_clause
    from tests.broken_stores.redis_variants import plain_cluster_store

    control = BrokenStore("redis-cluster-control", "none", "-", "transcript_round_trips_exactly", "-",
                          plain_cluster_store)
    failure = run_clause(control, request.getfixturevalue, 1)
    assert failure is None, failure.details
