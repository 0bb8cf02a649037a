"""langgraph-checkpoint-lmdb 0.3.1 ignores ``alist``'s metadata ``filter``: listing a
thread with ``filter={"source": "input"}`` gives its ``loop`` checkpoints too.
Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import lmdb
from langgraph_checkpoint_lmdb import AsyncLMDBSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import config, put


async def _run(directory: str) -> None:
    env = lmdb.open(directory, max_dbs=4)
    try:
        saver = AsyncLMDBSaver(env)
        first = await put(saver, "filtered", {"v": 1}, metadata={"source": "input", "step": -1})
        await put(saver, "filtered", {"v": 2}, parent=first, metadata={"source": "loop", "step": 0})
        listed = [t.metadata["source"] async for t in saver.alist(config("filtered"), filter={"source": "input"})]
        assert listed == ["loop", "input"], f"filter source=input listed {listed}"
    finally:
        env.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
