"""AsyncSqliteSaver gives back a ``bytearray`` channel value as ``bytes``: it keeps
channel values inside the checkpoint's one msgpack blob, where the serde's top-level
``bytearray`` tag is lost (InMemorySaver and AsyncPostgresSaver keep each channel
through ``dumps_typed`` and give back a ``bytearray``). Deterministic."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver


async def _run(path: str) -> None:
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"raw": bytearray(b"\x00ab")}
        checkpoint["channel_versions"] = {"raw": saver.get_next_version(None, None)}
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = await saver.aput(config, checkpoint, {}, dict(checkpoint["channel_versions"]))
        got = (await saver.aget_tuple(stored)).checkpoint["channel_values"]["raw"]  # type: ignore[union-attr]
        assert type(got) is bytes and got == b"\x00ab", f"a bytearray came back as {type(got).__name__} {got!r}"


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(_run(str(Path(directory) / "checkpoints.db")))


if __name__ == "__main__":
    main()
