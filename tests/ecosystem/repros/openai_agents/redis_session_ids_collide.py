"""RedisSession: session ``x:messages`` and session ``x`` share a key.

``RedisSession`` keeps session ``x``'s metadata hash at ``<prefix>:x`` and its items list
at ``<prefix>:x:messages``; session ``x:messages`` keeps its metadata hash at
``<prefix>:x:messages`` too. Whichever of the two conversations is written second fails
with Redis' WRONGTYPE, on a fresh server, in either order (deterministic).

    python tests/ecosystem/repros/openai_agents/redis_session_ids_collide.py
"""

from __future__ import annotations

import asyncio
import secrets

import redis.asyncio as redis
from agents.extensions.memory import RedisSession
from redis.exceptions import ResponseError

from storetest import databases


async def _second_writer_fails(url: str, prefix: str, first: str, second: str) -> str:
    client = redis.from_url(url)
    try:
        await RedisSession(first, redis_client=client, key_prefix=prefix).add_items(
            [{"role": "user", "content": f"to {first}"}])
        try:
            await RedisSession(second, redis_client=client, key_prefix=prefix).add_items(
                [{"role": "user", "content": f"to {second}"}])
        except ResponseError as exc:
            return str(exc)
        raise AssertionError(f"session {second!r} was written after session {first!r} without an error")
    finally:
        await client.aclose()


def main(storetest_redis_url: str | None = None, storetest_redis_prefix: str | None = None) -> None:
    """Under pytest, on the test run's Redis under its key prefix; alone, on a throwaway server."""
    if storetest_redis_url is None or storetest_redis_prefix is None:
        with databases.throwaway("redis") as target:
            return main(target.url, target.prefix)
    prefix = f"{storetest_redis_prefix}repro-{secrets.token_hex(4)}"
    one = asyncio.run(_second_writer_fails(storetest_redis_url, f"{prefix}:a", "x", "x:messages"))
    two = asyncio.run(_second_writer_fails(storetest_redis_url, f"{prefix}:b", "x:messages", "x"))
    assert "WRONGTYPE" in one and "WRONGTYPE" in two, (one, two)
    print(f"'x' then 'x:messages': {one}\n'x:messages' then 'x': {two}")


if __name__ == "__main__":
    main()
