"""A correct LlamaIndex chat store in under 50 lines: SQLite, one file shared by every
handle and process, each call one ``BEGIN IMMEDIATE`` transaction, messages as
``model_dump_json``. Bound below (``tests/test_llama_index.py``; ``storetest check
tests.llama_index_stores:sqlite_chat_store``)."""

import sqlite3
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base import BaseChatStore

from storetest import llama_index_chat_stores


class SQLiteChatStore(BaseChatStore):
    path: str

    def _run(self, sql: str, *args: object, many: list[tuple[object, ...]] | None = None) -> list[tuple[object, ...]]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("CREATE TABLE IF NOT EXISTS m (n INTEGER PRIMARY KEY, k TEXT NOT NULL, v TEXT NOT NULL)")
            db.execute("BEGIN IMMEDIATE")
            rows = db.execute(sql, args).fetchall()
            db.executemany("INSERT INTO m (k, v) VALUES (?, ?)", many or [])
            db.execute("COMMIT")
            return rows
        finally:
            db.close()

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        self._run("DELETE FROM m WHERE k = ?", key, many=[(key, m.model_dump_json()) for m in messages])

    def get_messages(self, key: str) -> list[ChatMessage]:
        return [ChatMessage.model_validate_json(str(v)) for (v,) in self._run(
            "SELECT v FROM m WHERE k = ? ORDER BY n", key)]

    def add_message(self, key: str, message: ChatMessage) -> None:
        self._run("SELECT 1", many=[(key, message.model_dump_json())])

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        return [ChatMessage.model_validate_json(str(v)) for (v,) in self._run(
            "DELETE FROM m WHERE k = ? RETURNING v", key)] or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        rows = [] if idx < 0 else self._run("DELETE FROM m WHERE n = (SELECT n FROM m WHERE k = ? ORDER BY n "
                                            "LIMIT 1 OFFSET ?) RETURNING v", key, idx)
        return ChatMessage.model_validate_json(str(rows[0][0])) if rows else None

    def delete_last_message(self, key: str) -> ChatMessage | None:
        rows = self._run("DELETE FROM m WHERE n = (SELECT MAX(n) FROM m WHERE k = ?) RETURNING v", key)
        return ChatMessage.model_validate_json(str(rows[0][0])) if rows else None

    def get_keys(self) -> list[str]:
        return [str(k) for (k,) in self._run("SELECT DISTINCT k FROM m")]


def sqlite_store(tmp_path: Path) -> SQLiteChatStore:
    return SQLiteChatStore(path=str(tmp_path / "chat.db"))


def neighbour_store(tmp_path: Path) -> SQLiteChatStore:
    return SQLiteChatStore(path=str(tmp_path / "another-app.db"))


sqlite_chat_store = llama_index_chat_stores(sqlite_store, neighbour=neighbour_store)
