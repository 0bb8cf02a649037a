"""The Redis log store against the whole conformance suite, on a throwaway Redis Cluster (three masters): the
replica is a second cluster client on the same cluster, with the same key prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storetest import run_conformance

aioredis = pytest.importorskip("redis.asyncio")

from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402

from reference_stores.redis_log import RedisLogStore  # noqa: E402


async def redis_cluster_log(
    storetest_redis_cluster_url: str, storetest_redis_prefix: str
) -> AsyncIterator[RedisLogStore]:
    client = aioredis.RedisCluster.from_url(
        storetest_redis_cluster_url, retry=Retry(NoBackoff(), 0), socket_timeout=10, socket_connect_timeout=10
    )
    try:
        yield RedisLogStore(client, prefix=storetest_redis_prefix)
    finally:
        await client.aclose()


run_conformance(redis_cluster_log, replica=redis_cluster_log, name="redis-cluster-log")
