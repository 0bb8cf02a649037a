"""langgraph-checkpoint-objectstorage 0.1.15 (local files) gives back a ``bytearray``
channel value as ``bytes`` (the serde's ``bytearray`` tag is lost; InMemorySaver and
AsyncPostgresSaver give back a ``bytearray``). Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from langgraph_checkpoint_objectstorage import ObjectStorageSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import bytearray_back


async def _run(directory: str) -> None:
    saver = ObjectStorageSaver.from_conn_string(f"file://{directory}")
    got = await bytearray_back(saver, "raw")
    assert type(got) is bytes and got == b"\x00ab", f"a bytearray came back as {type(got).__name__} {got!r}"


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
