"""langgraph-checkpoint-plainredis 0.1.0 keys a thread's timeline ``prefix:idx:{thread}:{ns}``
without escaping ``:``, so thread ``x:b`` in namespace ``c`` and thread ``x`` in
namespace ``b:c`` share one key: listing either gives the other's checkpoints.
Deterministic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph_checkpoint_plainredis import AsyncRedisSaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import config, put


async def _run(url: str, prefix: str) -> None:
    saver = AsyncRedisSaver(url=url, prefix=prefix)
    try:
        await put(saver, "x", {"v": "thread x, namespace b:c"}, ns="b:c")
        listed = [t.checkpoint["channel_values"]["v"] async for t in saver.alist(config("x:b", "c"))]
        assert listed == ["thread x, namespace b:c"], f"thread x:b, namespace c listed {listed}"
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
