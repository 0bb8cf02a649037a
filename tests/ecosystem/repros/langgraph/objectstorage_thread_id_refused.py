"""langgraph-checkpoint-objectstorage 0.1.15 refuses a thread id outside letters,
digits and ``.:-_`` (``ValueError``: it is one segment of the object path), so a
thread named ``user@example.com`` or ``a%b`` cannot be saved; LangGraph takes any
string as a thread id, and its own savers keep them. Deterministic."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from langgraph_checkpoint_objectstorage import ObjectStorageSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import put


async def _run(directory: str) -> None:
    saver = ObjectStorageSaver.from_conn_string(f"file://{directory}")
    try:
        await put(saver, "user@example.com", {"v": 1})
    except ValueError as exc:
        assert "is not a valid path segment" in str(exc), exc
        return
    raise AssertionError("a thread id with an @ was saved")


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(directory))


if __name__ == "__main__":
    main()
