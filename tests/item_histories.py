"""Correct item histories (the OpenAI Agents ``Session`` shape) for the tests: the
smallest one in memory, and one on a SQLite file that child processes can share."""

from __future__ import annotations

import asyncio
import copy
import json
import sqlite3
from pathlib import Path
from typing import Any

from storetest import item_sessions


class MemorySession:
    """A correct item history in memory: one lock per backend, a yield inside it."""

    def __init__(self, backend: tuple[asyncio.Lock, dict[str, list[Any]]], session_id: str) -> None:
        self.session_id, (self.lock, histories) = session_id, backend
        self.items = histories.setdefault(session_id, [])

    async def get_items(self, limit: int | None = None) -> list[Any]:
        async with self.lock:
            await asyncio.sleep(0)  # a round trip: other callers run here
            chosen = self.items if limit is None else self.items[-limit:] if limit else []
            return copy.deepcopy(chosen)

    async def add_items(self, items: list[Any]) -> None:
        async with self.lock:
            await asyncio.sleep(0)
            self.items += copy.deepcopy(items)

    async def pop_item(self) -> Any:
        async with self.lock:
            await asyncio.sleep(0)
            return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        async with self.lock:
            await asyncio.sleep(0)
            self.items.clear()


Backend = tuple[asyncio.Lock, dict[str, Any]]

#: Backends by directory (the two handles of one clause get the same tmp_path) and by
#: event loop (an asyncio.Lock belongs to one; a test may run several clauses in one directory).
_BACKENDS: dict[str, tuple[asyncio.AbstractEventLoop, Backend]] = {}


def backend_for(tmp_path: Path) -> Backend:
    """The memory backend of this directory on the running loop (call it from an outer factory)."""
    loop = asyncio.get_running_loop()
    known = _BACKENDS.get(str(tmp_path))
    if known is None or known[0] is not loop:
        known = _BACKENDS[str(tmp_path)] = (loop, (asyncio.Lock(), {}))
    return known[1]


async def memory_sessions(tmp_path: Path) -> Any:
    """The outer factory: one backend per clause's directory, an opener onto it."""
    backend = backend_for(tmp_path)
    return lambda session_id: MemorySession(backend, session_id)


class SQLiteItemSession:
    """A correct item history on a SQLite file, shared by threads and processes: one
    transaction per call, ``BEGIN IMMEDIATE`` for writes, items as JSON text."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS items (n INTEGER PRIMARY KEY, session BLOB, item TEXT)")

    def _write(self, work: Any) -> Any:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            result = work()
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return result

    def _key(self) -> bytes:
        return self.session_id.encode("utf-8", "surrogatepass")

    async def get_items(self, limit: int | None = None) -> list[Any]:
        rows = self.db.execute("SELECT item FROM (SELECT n, item FROM items WHERE session = ? ORDER BY n DESC "
                               "LIMIT ?) ORDER BY n", (self._key(), -1 if limit is None else limit)).fetchall()
        return [json.loads(r[0]) for r in rows]

    async def add_items(self, items: list[Any]) -> None:
        rows = [(self._key(), json.dumps(i)) for i in items]
        self._write(lambda: self.db.executemany("INSERT INTO items (session, item) VALUES (?, ?)", rows))

    async def pop_item(self) -> Any:
        row = self._write(lambda: self.db.execute(
            "DELETE FROM items WHERE n = (SELECT max(n) FROM items WHERE session = ?) RETURNING item",
            (self._key(),)).fetchone())
        return None if row is None else json.loads(row[0])

    async def clear_session(self) -> None:
        self._write(lambda: self.db.execute("DELETE FROM items WHERE session = ?", (self._key(),)))

    def close(self) -> None:
        self.db.close()


def sqlite_sessions(tmp_path: Path) -> Any:
    """The outer factory for child processes too: importable, a path in, an opener out."""
    return lambda session_id: SQLiteItemSession(session_id, tmp_path / "items.db")


#: For ``storetest check tests.item_histories:sqlite_items``: the binding, importable.
sqlite_items = item_sessions(sqlite_sessions)
