"""langgraph-checkpoint-plainredis 0.1.0 keeps each channel value under
``prefix:blob:{thread}:{ns}:{channel}:{version}`` and its versions are the base class's
integers (1, 2, ...): a fork of an older checkpoint (``update_state`` on it, or two
writers on one thread) gets the same next version as the branch it forks beside, and
its value overwrites that branch's. InMemorySaver and the Postgres saver add a random
part to each version. Deterministic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph_checkpoint_plainredis import AsyncRedisSaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import fork_overwrites


async def _run(url: str, prefix: str) -> None:
    saver = AsyncRedisSaver(url=url, prefix=prefix)
    try:
        await fork_overwrites(saver, "forked")
    finally:
        await saver.aclose()


def main(storetest_redis_url: str | None = None, storetest_redis_prefix: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis", prefix=databases.new_prefix()) as target:
            main(target.url, target.prefix)
        return
    asyncio.run(_run(storetest_redis_url, storetest_redis_prefix or databases.new_prefix()))


if __name__ == "__main__":
    main()
