"""The Redis log store against the whole conformance suite, on a throwaway server: the
replica is a second client on the same server, with the same key prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storetest import run_conformance

aioredis = pytest.importorskip("redis.asyncio")

from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402

from reference_stores.redis_log import RedisLogStore  # noqa: E402


async def redis_log(storetest_redis_url: str, storetest_redis_prefix: str) -> AsyncIterator[RedisLogStore]:
    client = aioredis.Redis.from_url(
        storetest_redis_url, retry=Retry(NoBackoff(), 0), socket_timeout=10, socket_connect_timeout=10
    )
    try:
        yield RedisLogStore(client, prefix=storetest_redis_prefix)
    finally:
        await client.aclose()


run_conformance(redis_log, replica=redis_log, name="redis-log")
