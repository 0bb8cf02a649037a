"""langgraph-checkpoint-lmdb 0.3.1 gives back a ``bytearray`` channel value as ``bytes``
(the serde's ``bytearray`` tag is lost; InMemorySaver and AsyncPostgresSaver give back
a ``bytearray``). Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import lmdb
from langgraph_checkpoint_lmdb import AsyncLMDBSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import bytearray_back


async def _run(directory: str) -> None:
    env = lmdb.open(directory, max_dbs=4)
    try:
        saver = AsyncLMDBSaver(env)
        got = await bytearray_back(saver, "raw")
        assert type(got) is bytes and got == b"\x00ab", f"a bytearray came back as {type(got).__name__} {got!r}"
    finally:
        env.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
