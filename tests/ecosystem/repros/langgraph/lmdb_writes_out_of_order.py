"""langgraph-checkpoint-lmdb 0.3.1 gives a checkpoint's pending writes in another order
than (task_path, task_id, idx), the order InMemorySaver and the Postgres saver give
(LangGraph applies pending writes in that order on resume). Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import lmdb
from langgraph_checkpoint_lmdb import AsyncLMDBSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import writes_order


async def _run(directory: str) -> None:
    env = lmdb.open(directory, max_dbs=4)
    try:
        saver = AsyncLMDBSaver(env)
        order = await writes_order(saver, "writes")
        assert order == ["a", "b"], f"pending writes came back as {order}"
    finally:
        env.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
