"""langgraph-checkpoint-objectstorage 0.1.15 (local files) gives a checkpoint's pending
writes in another order than (task_path, task_id, idx), the order InMemorySaver and the
Postgres saver give (LangGraph applies pending writes in that order on resume).
Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from langgraph_checkpoint_objectstorage import ObjectStorageSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import writes_order


async def _run(directory: str) -> None:
    saver = ObjectStorageSaver.from_conn_string(f"file://{directory}")
    order = await writes_order(saver, "writes")
    assert order == ["a", "b"], f"pending writes came back as {order}"


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
