"""LangGraph's own savers behind the checkpointer binding's one line: the in-memory
saver (one per backend directory, so a clause's two handles share it), the async SQLite
saver on a temp file, the async Postgres saver on a throwaway database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from storetest import checkpointers

_SAVERS: dict[str, Any] = {}


def memory_saver(tmp_path: Path, kind: type[InMemorySaver] = InMemorySaver) -> InMemorySaver:
    """The saver of the backend ``tmp_path`` names: one object per directory (an
    in-memory saver's second handle on the same data is the same saver)."""
    key = f"{kind.__module__}.{kind.__qualname__}:{tmp_path}"
    if key not in _SAVERS:
        _SAVERS[key] = kind()
    return _SAVERS[key]  # type: ignore[no-any-return]


async def sqlite_saver(tmp_path: Path) -> AsyncIterator[Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        yield saver


async def postgres_saver(storetest_postgres_url: str) -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(storetest_postgres_url) as saver:
        yield saver


memory_checkpointer = checkpointers(memory_saver)
sqlite_checkpointer = checkpointers(sqlite_saver)
postgres_checkpointer = checkpointers(postgres_saver)
