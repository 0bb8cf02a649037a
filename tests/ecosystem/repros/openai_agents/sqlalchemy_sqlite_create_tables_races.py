"""SQLAlchemySession(create_tables=True) on SQLite: "table agent_sessions already exists"
when another process creates the tables between its check and its CREATE TABLE.

``create_tables=True`` runs SQLAlchemy's ``create_all``: it looks for each table, then
issues ``CREATE TABLE`` (no ``IF NOT EXISTS``), under a lock that holds within one
process only. Here a second connection (standing for another process opening the same
file) holds the write lock with its own ``CREATE TABLE agent_sessions`` uncommitted:
the session's check finds no table, its ``CREATE TABLE`` waits for the lock, and when
the other connection commits it fails. Deterministic: the interleaving is forced (the
lock is held for 2 s, well within SQLite's 5 s busy timeout; should the session not
reach its check within those 2 s on a stalled machine, the attempt says so and is
repeated, up to 3 times).

    python tests/ecosystem/repros/openai_agents/sqlalchemy_sqlite_create_tables_races.py
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import create_async_engine


async def _first_add(path: Path, other: sqlite3.Connection) -> str:
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    session = SQLAlchemySession("conversation", engine=engine, create_tables=True)
    try:
        add = asyncio.ensure_future(session.add_items([{"role": "user", "content": "hello"}]))
        await asyncio.sleep(2.0)  # the session checked, found no table, and waits on the lock
        assert not add.done(), f"add_items() did not wait for the other connection's lock: {add}"
        other.commit()  # the other process's tables land
        try:
            await add
        except OperationalError as exc:
            return str(exc.orig)
        return ""
    finally:
        await engine.dispose()


def _attempt() -> str:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "sessions.db"
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("PRAGMA journal_mode = WAL")  # as the session sets it on every connection
        other.execute("BEGIN IMMEDIATE")
        other.execute("CREATE TABLE agent_sessions (session_id VARCHAR NOT NULL PRIMARY KEY)")
        try:
            return asyncio.run(_first_add(path, other))
        finally:
            other.close()


def main() -> None:
    for _ in range(3):
        error = _attempt()
        if error:
            break
    assert "already exists" in error, f"add_items() after another process created the tables: {error or 'no error'}"
    print(f"add_items() raised: {error}")


if __name__ == "__main__":
    main()
