"""The Redis reference store against the whole conformance suite, on a Redis Cluster of
three masters: every script and command of a session must stay in one hash slot.

The store and its replica each have a cluster client of their own on one throwaway
cluster, under this run's key prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storetest import run_conformance

redis = pytest.importorskip("redis")

from redis.asyncio import RedisCluster  # noqa: E402
from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402

from reference_stores.redis import RedisStore  # noqa: E402


async def _store(storetest_redis_cluster_url: str, storetest_redis_prefix: str) -> AsyncIterator[RedisStore]:
    client = RedisCluster.from_url(storetest_redis_cluster_url, retry=Retry(NoBackoff(), 0))
    try:
        yield RedisStore(client, prefix=storetest_redis_prefix)
    finally:
        await client.aclose()


run_conformance(_store, replica=_store, name="redis-cluster")
