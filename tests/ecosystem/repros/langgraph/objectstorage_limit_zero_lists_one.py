"""langgraph-checkpoint-objectstorage 0.1.15 (local files) lists one checkpoint for
``alist(limit=0)``: it checks the count against the limit after yielding each one.
InMemorySaver and the Postgres saver list none. Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from langgraph_checkpoint_objectstorage import ObjectStorageSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import config, put


async def _run(directory: str) -> None:
    saver = ObjectStorageSaver.from_conn_string(f"file://{directory}")
    first = await put(saver, "limited", {"v": 1})
    await put(saver, "limited", {"v": 2}, parent=first)
    listed = [t async for t in saver.alist(config("limited"), limit=0)]
    assert len(listed) == 1, f"alist(limit=0) listed {len(listed)} checkpoint(s)"


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
