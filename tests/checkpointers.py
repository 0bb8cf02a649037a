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


# Third-party savers (tests/ecosystem/langgraph.py), each on the backend its README shows.

async def mysql_saver(storetest_mysql_url: str) -> AsyncIterator[Any]:
    """langgraph-checkpoint-mysql's asyncmy saver (its aiomysql one breaks with PyMySQL 1.2.4)."""
    from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver

    async with AsyncMySaver.from_conn_string(storetest_mysql_url) as saver:
        yield saver


async def plainredis_saver(storetest_redis_url: str, storetest_redis_prefix: str) -> AsyncIterator[Any]:
    from langgraph_checkpoint_plainredis import AsyncRedisSaver

    saver = AsyncRedisSaver(url=storetest_redis_url, prefix=storetest_redis_prefix)
    try:
        yield saver
    finally:
        await saver.aclose()


def hotkv_saver(storetest_redis_url: str, storetest_redis_prefix: str) -> Any:
    """langgraph-checkpoint-hotkv on plain Redis, through a ``redis://`` URL."""
    from langgraph.checkpoint.hotkv import AsyncHotKVSaver

    return AsyncHotKVSaver.from_conn_string(storetest_redis_url, prefix=storetest_redis_prefix)


def objectstorage_saver(tmp_path: Path) -> Any:
    """langgraph-checkpoint-objectstorage on local files (fsspec's ``file://``)."""
    from langgraph_checkpoint_objectstorage import ObjectStorageSaver

    return ObjectStorageSaver.from_conn_string(f"file://{tmp_path / 'checkpoints'}")


_LMDB: dict[tuple[int, str], Any] = {}


async def lmdb_saver(tmp_path: Path) -> AsyncIterator[Any]:
    """langgraph-checkpoint-lmdb's async saver; LMDB opens a directory once per process,
    so the handles of one process share its environment."""
    import os

    import lmdb
    from langgraph_checkpoint_lmdb import AsyncLMDBSaver

    key = (os.getpid(), str(tmp_path))
    if key not in _LMDB:
        _LMDB[key] = lmdb.open(str(tmp_path / "checkpoints.lmdb"), max_dbs=4, map_size=1 << 30)
    saver = AsyncLMDBSaver(_LMDB[key])
    try:
        yield saver
    finally:
        saver.executor.shutdown(wait=False)


mysql_checkpointer = checkpointers(mysql_saver)
# Its sync methods raise NotImplementedError ("use RedisSaver"): judged on its async API.
plainredis_checkpointer = checkpointers(plainredis_saver, api="async")
hotkv_checkpointer = checkpointers(hotkv_saver)
objectstorage_checkpointer = checkpointers(objectstorage_saver)
lmdb_checkpointer = checkpointers(lmdb_saver)
