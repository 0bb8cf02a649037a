"""The Redis reference store against the whole conformance suite, on a single server.

The store and its replica each have a client of their own (their own connection pool)
on one throwaway server, as two processes of one application would, under this run's
key prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storetest import run_conformance

redis = pytest.importorskip("redis")

from redis.asyncio import Redis  # noqa: E402

from reference_stores.redis import RedisStore  # noqa: E402


async def _store(storetest_redis_url: str, storetest_redis_prefix: str) -> AsyncIterator[RedisStore]:
    client = Redis.from_url(storetest_redis_url, socket_timeout=10, socket_connect_timeout=10)
    try:
        yield RedisStore(client, prefix=storetest_redis_prefix)
    finally:
        await client.aclose()


run_conformance(_store, replica=_store, name="redis")
