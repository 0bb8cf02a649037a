"""What the LangGraph repros share: a checkpoint put through a saver's own async API
(``aput``, ``aput_writes``, ``aget_tuple``, ``alist``), with the saver's own channel
versions. Named apart from the other SDKs' probe modules (a repro folder's helper
imported first would serve them all)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint


def config(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def put(saver: Any, thread: str, values: dict[str, Any], *, ns: str = "", parent: Any = None,
              metadata: dict[str, Any] | None = None) -> Any:
    """Put a checkpoint holding ``values``, a child of ``parent`` (the config an earlier
    put returned) when given, each channel's version the saver's next after the parent's."""
    previous: dict[str, Any] = {}
    if parent is not None:
        found = await saver.aget_tuple(parent)
        previous = dict(found.checkpoint["channel_versions"])
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = dict(values)
    versions = {k: saver.get_next_version(previous.get(k), None) for k in values}
    checkpoint["channel_versions"] = {**previous, **versions}
    where = config(thread, ns, parent["configurable"]["checkpoint_id"] if parent else None)
    return await saver.aput(where, checkpoint, metadata or {}, versions)


async def fork_overwrites(saver: Any, thread: str) -> None:
    """A checkpoint c2 and a fork c2' of its parent c1 each write channel ``v``; reading
    c2 back must give c2's value. Asserts that it gives the fork's (both got the same
    next version, and the value is kept by version)."""
    c1 = await put(saver, thread, {"v": "c1"})
    c2 = await put(saver, thread, {"v": "c2"}, parent=c1)
    await put(saver, thread, {"v": "fork of c1"}, parent=c1)
    got = (await saver.aget_tuple(c2)).checkpoint["channel_values"]["v"]
    assert got == "fork of c1", f"c2 kept its own value ({got!r})"


async def writes_order(saver: Any, thread: str) -> list[str]:
    """The task ids of a checkpoint's pending writes as read back, after task ``a`` (task
    path ``~2``) and then task ``b`` (task path ``~1``) wrote; LangGraph's Postgres and
    in-memory savers give them by (task_path, task_id, idx): ``['b', 'a']``."""
    stored = await put(saver, thread, {"v": 0})
    await saver.aput_writes(stored, [("x", "from a")], "a", "~2")
    await saver.aput_writes(stored, [("x", "from b")], "b", "~1")
    return [w[0] for w in (await saver.aget_tuple(stored)).pending_writes]


async def bytearray_back(saver: Any, thread: str) -> Any:
    """What a ``bytearray`` channel value comes back as."""
    stored = await put(saver, thread, {"raw": bytearray(b"\x00ab")})
    return (await saver.aget_tuple(stored)).checkpoint["channel_values"]["raw"]
