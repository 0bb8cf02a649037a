"""LangGraph's own savers behind the checkpointer binding's one line: the in-memory
saver (one per backend directory, so a clause's two handles share it), the async SQLite
saver on a temp file, the async Postgres saver on a throwaway database; and
:class:`FileSaver`, the in-memory saver's data in one file every process shares, and
:class:`MaintainedSaver`, the in-memory saver with the optional ``copy_thread``,
``prune`` and ``delete_for_runs`` (the controls of the broken savers built on them)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator, Sequence
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


class FileSaver(InMemorySaver):
    """``InMemorySaver``'s data in one pickle file in ``directory``: each call loads it,
    runs the in-memory saver's method, and (if it wrote) saves the file whole to a
    temporary file renamed over the old one, all under an exclusive ``flock``, so
    processes sharing the directory see each other's calls and a kill leaves the old
    file or the new one."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.file = directory / "checkpoints.pickle"
        self.lock_file = directory / "checkpoints.lock"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.lock_file, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _load(self) -> None:
        try:
            data = pickle.loads(self.file.read_bytes())
        except FileNotFoundError:
            data = ({}, {}, {})
        storage, writes, blobs = data
        self.storage = defaultdict(lambda: defaultdict(dict), {t: defaultdict(dict, n) for t, n in storage.items()})
        self.writes, self.blobs = defaultdict(dict, writes), dict(blobs)

    def _save(self) -> None:
        data = ({t: dict(n) for t, n in self.storage.items()}, dict(self.writes), dict(self.blobs))
        temporary = self.file.with_name(f"{self.file.name}.{os.getpid()}.tmp")
        temporary.write_bytes(pickle.dumps(data))
        os.replace(temporary, self.file)

    def _call(self, method: Any, *args: Any, write: bool, **kwargs: Any) -> Any:
        with self._locked():
            self._load()
            done = method(self, *args, **kwargs)
            if write:
                self._save()
            return done

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(InMemorySaver.put, *args, write=True, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self._call(InMemorySaver.put_writes, *args, write=True, **kwargs)

    def delete_thread(self, *args: Any, **kwargs: Any) -> None:
        self._call(InMemorySaver.delete_thread, *args, write=True, **kwargs)

    def get_tuple(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(InMemorySaver.get_tuple, *args, write=False, **kwargs)

    def list(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return iter(self._call(lambda s, *a, **k: list(InMemorySaver.list(s, *a, **k)), *args, write=False,
                               **kwargs))


def file_saver(tmp_path: Path) -> FileSaver:
    return FileSaver(tmp_path)


class MaintainedSaver(InMemorySaver):
    """``InMemorySaver`` with the base class's optional methods, as their docstrings
    define them: ``copy_thread`` copies every checkpoint, write and blob of every
    namespace; ``prune`` keeps each namespace's latest checkpoint with its writes and
    the blobs it references (its parent dropped, as ``AsyncPostgresSaver`` does), or
    deletes the threads; ``delete_for_runs`` deletes the checkpoints whose metadata's
    ``run_id`` is given, with their writes, in every thread and namespace."""

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        for ns, saved in self.storage.get(source_thread_id, {}).items():
            self.storage[target_thread_id][ns] = dict(saved)
        for (thread, ns, cid), writes in list(self.writes.items()):
            if thread == source_thread_id:
                self.writes[(target_thread_id, ns, cid)] = dict(writes)
        for (thread, ns, channel, version), blob in list(self.blobs.items()):
            if thread == source_thread_id:
                self.blobs[(target_thread_id, ns, channel, version)] = blob

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"Unknown prune strategy: {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for ns, saved in self.storage.get(thread_id, {}).items():
                if not saved:
                    continue
                latest = max(saved)
                checkpoint, metadata, _ = saved[latest]
                saved.clear()
                saved[latest] = (checkpoint, metadata, None)
                kept = self.serde.loads_typed(checkpoint)["channel_versions"]
                for key in [k for k in self.writes if k[:2] == (thread_id, ns) and k[2] != latest]:
                    del self.writes[key]
                for key in [k for k in self.blobs if k[:2] == (thread_id, ns) and kept.get(k[2]) != k[3]]:
                    del self.blobs[key]

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        for thread_id, namespaces in self.storage.items():
            for ns, saved in namespaces.items():
                for cid, (_, metadata, _) in list(saved.items()):
                    if self.serde.loads_typed(metadata).get("run_id") in runs:
                        del saved[cid]
                        self.writes.pop((thread_id, ns, cid), None)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)


def maintained_saver(tmp_path: Path) -> MaintainedSaver:
    return memory_saver(tmp_path, MaintainedSaver)  # type: ignore[return-value]


async def sqlite_saver(tmp_path: Path) -> AsyncIterator[Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        yield saver


async def postgres_saver(storetest_postgres_url: str) -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(storetest_postgres_url) as saver:
        yield saver


def sync_sqlite_saver(tmp_path: Path) -> Iterator[Any]:
    """``SqliteSaver``, the sync class (``AsyncSqliteSaver``'s sync methods only bridge)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        yield saver


def sync_postgres_saver(storetest_postgres_url: str) -> Iterator[Any]:
    """``PostgresSaver``, the sync class, on one psycopg connection (as its README shows)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(storetest_postgres_url) as saver:
        yield saver


memory_checkpointer = checkpointers(memory_saver)
file_checkpointer = checkpointers(file_saver)
maintained_checkpointer = checkpointers(maintained_saver)
sqlite_checkpointer = checkpointers(sqlite_saver)
postgres_checkpointer = checkpointers(postgres_saver)
sync_sqlite_checkpointer = checkpointers(sync_sqlite_saver)
sync_postgres_checkpointer = checkpointers(sync_postgres_saver)


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
