"""langgraph-checkpoint-hotkv 1.0.0 (on plain Redis, through ``redis://``) keeps each
channel value by (thread, namespace, channel, version) and its versions are the base
class's integers (1, 2, ...): a fork of an older checkpoint (``update_state`` on it, or
two writers on one thread) gets the same next version as the branch beside it, and
its value overwrites that branch's. InMemorySaver and the Postgres saver add a random
part to each version. Deterministic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph.checkpoint.hotkv import AsyncHotKVSaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import fork_overwrites


async def _run(url: str, prefix: str) -> None:
    async with AsyncHotKVSaver.from_conn_string(url, prefix=prefix) as saver:
        await fork_overwrites(saver, "forked")


def main(storetest_redis_url: str | None = None, storetest_redis_prefix: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis", prefix=databases.new_prefix()) as target:
            main(target.url, target.prefix)
        return
    asyncio.run(_run(storetest_redis_url, storetest_redis_prefix or databases.new_prefix()))


if __name__ == "__main__":
    main()
