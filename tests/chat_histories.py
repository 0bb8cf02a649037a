"""A correct LangChain chat history in under 50 lines: SQLite, one file shared by every
handle and process, each batch one ``BEGIN IMMEDIATE`` transaction, messages stored as
``message_to_dict`` JSON; sync methods, and async ones that run them in a thread. Bound
both ways below (``tests/test_chat_histories.py``; ``storetest check
tests.chat_histories:sqlite_chat``)."""

import asyncio
import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from storetest import chat_histories


class SQLiteChatHistory(BaseChatMessageHistory):
    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id, self.path = session_id, path

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("CREATE TABLE IF NOT EXISTS m (n INTEGER PRIMARY KEY, s TEXT NOT NULL, v TEXT NOT NULL)")
        return db

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        with self._db() as db:
            rows = db.execute("SELECT v FROM m WHERE s = ? ORDER BY n", (self.session_id,)).fetchall()
        return messages_from_dict([json.loads(v) for (v,) in rows])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO m (s, v) VALUES (?, ?)",
                           [(self.session_id, json.dumps(message_to_dict(m))) for m in messages])
            db.execute("COMMIT")
        finally:
            db.close()

    def clear(self) -> None:
        with self._db() as db:
            db.execute("DELETE FROM m WHERE s = ?", (self.session_id,))

    async def aget_messages(self) -> list[BaseMessage]:
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await asyncio.to_thread(self.add_messages, messages)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)


def sqlite_opener(tmp_path: Path) -> Callable[[str], SQLiteChatHistory]:
    return lambda session_id: SQLiteChatHistory(session_id, tmp_path / "chat.db")


sqlite_chat = chat_histories(sqlite_opener)
async_sqlite_chat = chat_histories(sqlite_opener, asynchronous=True)
