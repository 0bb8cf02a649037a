"""Broken Redis stores, on the real throwaway server (``storetest_redis_url``) or cluster
(``storetest_redis_cluster_url``). The memory variants show the same mistakes in
memory; these show the suite catches them where they happen, through redis-py.

Each factory writes under a prefix of its own inside the run's
(``storetest_redis_prefix`` + ``broken:<random>:``), so variants never share keys.
:class:`PlainRedisStore` is the correct base each variant changes in one place: a
transcript list and a steer list per session, keys ``<prefix>{<id>}:m`` and ``:s`` (the
reference store's :func:`~reference_stores.redis.session_key`), a save as ``DEL`` and
``RPUSH`` inside ``MULTI``/``EXEC``, a take as ``LRANGE`` and ``DEL`` inside one.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster

from reference_stores.redis import session_key
from storetest.codec import decode_message, encode_message
from storetest.contract import Message, check_messages, check_session_id, check_steer_text
from tests.broken_stores import BrokenStore


class PlainRedisStore:
    """Correct and simple: every write one transaction, every read one command."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def key(self, session: str, kind: str) -> bytes:
        return session_key(self.prefix, session, kind)

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        bodies = [encode_message(m) for m in check_messages(messages)]
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.key(session, "m"))
            if bodies:
                pipe.rpush(self.key(session, "m"), *bodies)
            await pipe.execute()

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        return [decode_message(b.decode()) for b in await self.read(self.key(session, "m"))]

    async def read(self, key: bytes) -> list[bytes]:
        return list(await self.client.lrange(key, 0, -1))

    async def add_steer(self, session: str, text: str) -> None:
        session = check_session_id(session)
        await self.client.rpush(self.key(session, "s"), check_steer_text(text).encode())

    async def take_steers(self, session: str) -> list[str]:
        key = self.key(check_session_id(session), "s")
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.lrange(key, 0, -1)
            pipe.delete(key)
            taken, _ = await pipe.execute()
        return [t.decode() for t in taken]


class LrangeThenDelTakeStore(PlainRedisStore):
    """take_steers reads the list, then deletes it: two commands, nothing between them held."""

    async def take_steers(self, session: str) -> list[str]:
        key = self.key(check_session_id(session), "s")
        taken = await self.client.lrange(key, 0, -1)
        await self.client.delete(key)
        return [t.decode() for t in taken]


class DeleteThenPushSaveStore(PlainRedisStore):
    """save deletes the list, then pushes the messages one command at a time, no MULTI."""

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        key = self.key(check_session_id(session), "m")
        bodies = [encode_message(m) for m in check_messages(messages)]
        await self.client.delete(key)
        for body in bodies:
            await self.client.rpush(key, body)


class LowercasedKeysStore(PlainRedisStore):
    """Keys made from the session id lower-cased."""

    def key(self, session: str, kind: str) -> bytes:
        return session_key(self.prefix, session.lower(), kind)


class FirstThousandStore(PlainRedisStore):
    """messages() reads ``LRANGE key 0 999``: the first 1,000 messages only."""

    async def read(self, key: bytes) -> list[bytes]:
        return list(await self.client.lrange(key, 0, 999))


class SuffixKeysStore(PlainRedisStore):
    """Keys ``prefix:<id>`` (a hash of session metadata) and ``prefix:<id>:messages``
    (a list), as several Redis session stores lay them out, so session ``x:messages``'s
    metadata key is session ``x``'s message list."""

    def key(self, session: str, kind: str) -> bytes:
        base = f"{self.prefix}{session}"
        return {"meta": base, "m": f"{base}:messages", "s": f"{base}:steers"}[kind].encode()

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        bodies = [encode_message(m) for m in check_messages(messages)]
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.key(session, "meta"), "session_id", session)
            pipe.delete(self.key(session, "m"))
            if bodies:
                pipe.rpush(self.key(session, "m"), *bodies)
            await pipe.execute()


# KEYS: messages, version. ARGV: the bodies.
_SAVE_ACROSS_SLOTS = """
redis.call('DEL', KEYS[1])
for i = 1, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
return redis.call('INCR', KEYS[2])
"""


class CrossSlotKeysStore(PlainRedisStore):
    """Keys ``prefix:messages:<id>`` and ``prefix:version:<id>`` with no hash tag, saved
    by one Lua script: fine on one server, refused by a cluster (``CROSSSLOT``), where
    the two keys of a session fall in different slots."""

    def key(self, session: str, kind: str) -> bytes:
        return f"{self.prefix}{ {'m': 'messages', 's': 'steers', 'v': 'version'}[kind] }:{session}".encode()

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        bodies = [encode_message(m) for m in check_messages(messages)]
        await self.client.eval(_SAVE_ACROSS_SLOTS, 2, self.key(session, "m"), self.key(session, "v"), *bodies)


def _prefix(run_prefix: str) -> str:
    return f"{run_prefix}broken:{secrets.token_hex(4)}:"


def _on_server(cls: type[PlainRedisStore]) -> Any:
    async def factory(storetest_redis_url: str, storetest_redis_prefix: str) -> AsyncIterator[PlainRedisStore]:
        async for store in _opened(cls, Redis.from_url(storetest_redis_url), storetest_redis_prefix):
            yield store

    return _named(factory, cls)


def _on_cluster(cls: type[PlainRedisStore]) -> Any:
    async def factory(
        storetest_redis_cluster_url: str, storetest_redis_prefix: str
    ) -> AsyncIterator[PlainRedisStore]:
        async for store in _opened(cls, RedisCluster.from_url(storetest_redis_cluster_url), storetest_redis_prefix):
            yield store

    return _named(factory, cls)


async def _opened(cls: type[PlainRedisStore], client: Any, run_prefix: str) -> AsyncIterator[PlainRedisStore]:
    try:
        yield cls(client, _prefix(run_prefix))
    finally:
        await client.aclose()


def _named(factory: Any, cls: type[PlainRedisStore]) -> Any:
    factory.__doc__ = cls.__doc__
    factory.__module__ = __name__
    return factory


plain_store = _on_server(PlainRedisStore)
plain_cluster_store = _on_cluster(PlainRedisStore)

BROKEN: list[BrokenStore] = [
    BrokenStore(
        "redis-lrange-then-del-take",
        "take is LRANGE, then DEL, as two commands",
        "the first take everyone writes on Redis; no MULTI/EXEC, WATCH or Lua script",
        "steers_are_taken_exactly_once_under_concurrency", "duplicated",
        _on_server(LrangeThenDelTakeStore), racy=True,
    ),
    BrokenStore(
        "redis-save-delete-then-push",
        "save is DEL, then one RPUSH per message, outside a transaction",
        "a replace written as clear() then add_messages(), each message its own command",
        "concurrent_saves_leave_one_transcript", "transcript torn",
        _on_server(DeleteThenPushSaveStore), racy=True,
    ),
    BrokenStore(
        "redis-lowercased-keys",
        "keys made from the session id lower-cased",
        "ids normalized with .lower() before building a key",
        "sessions_are_isolated", "differ only by case",
        _on_server(LowercasedKeysStore),
    ),
    BrokenStore(
        "redis-lrange-first-thousand",
        "messages() reads LRANGE key 0 999",
        "a page size left in a read; a 'latest 1,000' window used as the whole history",
        "large_values_round_trip", "messages lost: 1000 of 2000 came back",
        _on_server(FirstThousandStore),
    ),
    BrokenStore(
        "redis-suffix-keys",
        "keys prefix:<id> and prefix:<id>:messages, so session 'x:messages' shares a key with 'x'",
        "Redis session stores keying metadata and messages by the raw id plus a suffix",
        "sessions_are_isolated", "two sessions' keys collide",
        _on_server(SuffixKeysStore),
    ),
    BrokenStore(
        "redis-cluster-cross-slot",
        "keys of one session without a hash tag, saved by one script: a cluster refuses it",
        "a store that works on one Redis server, moved onto a Redis Cluster",
        "transcript_round_trips_exactly", "keys of one session in different hash slots",
        _on_cluster(CrossSlotKeysStore),
    ),
]
