"""A correct Agent Framework history provider: SQLite, a message a row, a batch a transaction."""

import sqlite3
from pathlib import Path
from typing import Any

from agent_framework import HistoryProvider, Message

from storetest import history_providers


class SQLiteHistoryProvider(HistoryProvider):
    def __init__(self, path: Path) -> None:
        super().__init__("sqlite_history")
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS messages (n INTEGER PRIMARY KEY, session BLOB, message TEXT)")

    async def get_messages(self, session_id: str | None, *, state: Any = None, **kwargs: Any) -> list[Message]:
        key = str(session_id).encode("utf-8", "surrogatepass")
        rows = self.db.execute("SELECT message FROM messages WHERE session = ? ORDER BY n", (key,)).fetchall()
        return [Message.from_json(row[0]) for row in rows]

    async def save_messages(self, session_id: str | None, messages: Any, *, state: Any = None, **kw: Any) -> None:
        key = str(session_id).encode("utf-8", "surrogatepass")
        rows = [(key, m.to_json()) for m in messages]
        with self.db:  # BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an error
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("INSERT INTO messages (session, message) VALUES (?, ?)", rows)

    def close(self) -> None:
        self.db.close()


def sqlite_provider(tmp_path: Path) -> SQLiteHistoryProvider:
    return SQLiteHistoryProvider(tmp_path / "history.db")


sqlite_history = history_providers(sqlite_provider)
