"""langgraph-checkpoint-hotkv 1.0.0 (on plain Redis): ``adelete_thread`` racing an
``aput`` to the same thread can leave the new checkpoint without its channel values
(the delete collects every value of the namespace after it removed the checkpoints it
listed, while the put adds a checkpoint that refers to its new values). One round puts
an old checkpoint, then deletes the thread and puts a new one at once; the bounded loop
tries up to 200 rounds."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.hotkv import AsyncHotKVSaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import config, put

ROUNDS = 200


async def _round(saver: AsyncHotKVSaver, thread: str, delete_first: bool) -> str:
    old = await put(saver, thread, {"v": "old", "blob": {"nested": [1]}})
    values: dict[str, object] = {"v": "new", "blob": {"nested": [2]}, "more": b"\x00new"}
    # Every channel at a new version, decided before the race: the new checkpoint needs
    # nothing the delete may take.
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = {k: saver.get_next_version(1, None) for k in values}
    where = config(thread, "", old["configurable"]["checkpoint_id"])
    new = saver.aput(where, checkpoint, {}, dict(checkpoint["channel_versions"]))
    calls = [saver.adelete_thread(thread), new]
    await asyncio.gather(*(calls if delete_first else calls[::-1]))
    found = await saver.aget_tuple(config(thread, "", checkpoint["id"]))
    if found is None or found.checkpoint["channel_values"] == values:
        return ""
    return f"the new checkpoint holds {found.checkpoint['channel_values']}"


async def _run(url: str, prefix: str) -> int:
    async with AsyncHotKVSaver.from_conn_string(url, prefix=prefix) as saver:
        for i in range(ROUNDS):
            if await _round(saver, f"race-{i}", i % 2 == 0):
                return i + 1
    return 0


def main(storetest_redis_url: str | None = None, storetest_redis_prefix: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis", prefix=databases.new_prefix()) as target:
            main(target.url, target.prefix)
        return
    rounds = asyncio.run(_run(storetest_redis_url, storetest_redis_prefix or databases.new_prefix()))
    assert rounds, f"{ROUNDS} deletes racing a put left every new checkpoint whole (or gone)"


if __name__ == "__main__":
    main()
