"""langgraph-checkpoint-hotkv 1.0.0 (on plain Redis) gives a checkpoint's pending
writes sorted by (task_id, idx), not by (task_path, task_id, idx) as InMemorySaver and
the Postgres saver do (LangGraph applies pending writes in that order on resume).
Deterministic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph.checkpoint.hotkv import AsyncHotKVSaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import writes_order


async def _run(url: str, prefix: str) -> None:
    async with AsyncHotKVSaver.from_conn_string(url, prefix=prefix) as saver:
        order = await writes_order(saver, "writes")
        assert order == ["a", "b"], f"pending writes came back as {order}, not by task id"


def main(storetest_redis_url: str | None = None, storetest_redis_prefix: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis", prefix=databases.new_prefix()) as target:
            main(target.url, target.prefix)
        return
    asyncio.run(_run(storetest_redis_url, storetest_redis_prefix or databases.new_prefix()))


if __name__ == "__main__":
    main()
