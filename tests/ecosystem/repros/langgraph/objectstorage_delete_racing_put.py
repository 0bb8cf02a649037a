"""langgraph-checkpoint-objectstorage 0.1.15 (local files): ``adelete_thread`` racing an
``aput`` to the same thread raises ``FileNotFoundError`` or ``OSError`` "Directory not
empty" (the delete removes the thread's directory tree while the put writes a file
into it). One round puts an old checkpoint, then deletes the thread and puts a child
of it at once; the bounded loop tries up to 200 rounds."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph_checkpoint_objectstorage import ObjectStorageSaver

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import config, put

ROUNDS = 200


async def _round(saver: ObjectStorageSaver, thread: str, delete_first: bool) -> list[BaseException]:
    old = await put(saver, thread, {"v": "old"})
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"v": "new", "more": b"\x00new"}
    checkpoint["channel_versions"] = {k: saver.get_next_version(1, None) for k in checkpoint["channel_values"]}
    new = saver.aput(config(thread, "", old["configurable"]["checkpoint_id"]), checkpoint, {},
                     dict(checkpoint["channel_versions"]))
    calls = [saver.adelete_thread(thread), new]
    done = await asyncio.gather(*(calls if delete_first else calls[::-1]), return_exceptions=True)
    return [e for e in done if isinstance(e, BaseException)]


async def _run(directory: str) -> int:
    saver = ObjectStorageSaver.from_conn_string(f"file://{directory}")
    for i in range(ROUNDS):
        errors = await _round(saver, f"race-{i}", i % 2 == 0)
        if errors:
            assert all(isinstance(e, OSError) for e in errors), errors
            return i + 1
    return 0


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        rounds = asyncio.run(_run(directory))
    assert rounds, f"{ROUNDS} deletes racing a put all succeeded"


if __name__ == "__main__":
    main()
