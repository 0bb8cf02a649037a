"""LangGraph's own savers behind the checkpointer binding's one line: the in-memory
saver (one per backend directory, so a clause's two handles share it), the async SQLite
saver on a temp file, the async Postgres saver on a throwaway database; and
:class:`FileSaver`, the in-memory saver's data in one file every process shares (the
control of the broken file savers)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
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


async def sqlite_saver(tmp_path: Path) -> AsyncIterator[Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
        yield saver


async def postgres_saver(storetest_postgres_url: str) -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(storetest_postgres_url) as saver:
        yield saver


memory_checkpointer = checkpointers(memory_saver)
file_checkpointer = checkpointers(file_saver)
sqlite_checkpointer = checkpointers(sqlite_saver)
postgres_checkpointer = checkpointers(postgres_saver)
