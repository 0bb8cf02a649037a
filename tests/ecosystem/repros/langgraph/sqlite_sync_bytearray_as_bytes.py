"""SqliteSaver (the sync class) gives back a ``bytearray`` channel value as ``bytes``,
as AsyncSqliteSaver does: channel values are kept inside the checkpoint's one msgpack
blob, where the serde's top-level ``bytearray`` tag is lost. Deterministic."""

from __future__ import annotations

import tempfile
from pathlib import Path

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver


def main() -> None:
    with tempfile.TemporaryDirectory() as directory, \
            SqliteSaver.from_conn_string(str(Path(directory) / "checkpoints.db")) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"raw": bytearray(b"\x00ab")}
        checkpoint["channel_versions"] = {"raw": saver.get_next_version(None, None)}
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        stored = saver.put(config, checkpoint, {}, dict(checkpoint["channel_versions"]))
        got = saver.get_tuple(stored).checkpoint["channel_values"]["raw"]  # type: ignore[union-attr]
        assert type(got) is bytes and got == b"\x00ab", f"a bytearray came back as {type(got).__name__} {got!r}"


if __name__ == "__main__":
    main()
