"""A fact about the driver that the Redis store's cluster runs depend on.

redis-py 8.0.1 and 8.1.0's ``redis.asyncio.RedisCluster`` fail when many commands
arrive at once on a client that has not connected yet: ``AttributeError: 'NoneType'
object has no attribute 'writelines'`` from inside the driver, for plain ``INCR`` as
for scripts (measured here: 8.0.1 and 8.1.0 failed in the first of 20 rounds, 7.4.1
passed 60 of 60). Every concurrency clause of the cluster conformance run opens a
fresh client, so the ``redis`` extra pins ``redis<8``; this test is the repro, and it
fails on the installed driver if the pin is lifted while the bug is there.
"""

from __future__ import annotations

import asyncio

import pytest

redis = pytest.importorskip("redis")

from redis.asyncio import RedisCluster  # noqa: E402


def test_a_fresh_cluster_client_takes_many_first_commands_at_once(
    storetest_redis_cluster_url: str, storetest_redis_prefix: str
) -> None:
    async def rounds() -> None:
        for _ in range(10):
            client = RedisCluster.from_url(storetest_redis_cluster_url)
            try:
                keys = [f"{storetest_redis_prefix}driver{{{i}}}" for i in range(30)]
                await asyncio.gather(*(client.incr(key) for key in keys))
                await client.delete(*keys[:1])
            finally:
                await client.aclose()

    asyncio.run(rounds())
