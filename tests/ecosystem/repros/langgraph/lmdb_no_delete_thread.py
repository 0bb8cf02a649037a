"""langgraph-checkpoint-lmdb 0.3.1 has no ``delete_thread``: ``AsyncLMDBSaver.adelete_thread``
(and ``LMDBSaver.delete_thread``) is the base class's, which raises
``NotImplementedError``, so a thread can never be deleted; LangGraph's conformance suite
counts ``delete_thread`` among the capabilities every saver must have. Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import lmdb
from langgraph_checkpoint_lmdb import AsyncLMDBSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import put


async def _run(directory: str) -> None:
    env = lmdb.open(directory, max_dbs=4)
    try:
        saver = AsyncLMDBSaver(env)
        await put(saver, "kept", {"v": 1})
        try:
            await saver.adelete_thread("kept")
        except NotImplementedError:
            return
        raise AssertionError("adelete_thread() returned")
    finally:
        env.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
