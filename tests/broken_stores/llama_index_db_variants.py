"""Broken LlamaIndex ``AsyncDBChatStore`` queues: llama-index-core's own
``SQLAlchemyChatStore`` on SQLite (the control, which passes the queue clauses) changed
in one place each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from sqlalchemy.ext.asyncio import create_async_engine

from storetest import llama_index_db_chat_stores, owned
from tests.broken_stores import BrokenStore


class CountsEveryStatus(SQLAlchemyChatStore):
    """``count_messages`` counts the key's rows whatever their status (the filter dropped)."""

    async def count_messages(self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE) -> int:
        return await super().count_messages(key, status=None)


class ArchivesTheNewest(SQLAlchemyChatStore):
    """``archive_oldest_messages`` takes the newest ``n`` (an ``ORDER BY`` the wrong way)."""

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        active = await self.get_messages(key)
        newest = active[len(active) - n:] if n else []
        rest = active[: len(active) - len(newest)]
        await self.delete_messages(key, status=MessageStatus.ACTIVE)
        await self.add_messages(key, newest, status=MessageStatus.ARCHIVED) if newest else None
        await self.add_messages(key, rest) if rest else None
        return newest


def _factory(cls: type[SQLAlchemyChatStore]) -> Any:
    def store(tmp_path: Path) -> SQLAlchemyChatStore:
        return cls("chat", async_engine=owned(create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/chat.db")))

    store.__name__ = store.__qualname__ = f"{cls.__name__}_store"
    return llama_index_db_chat_stores(store)


control = _factory(SQLAlchemyChatStore)

BROKEN = [
    BrokenStore("llama-db-count-every-status", "count_messages counts archived messages as active",
                "a count query without its status filter", "count_messages_counts_each_status",
                "after adding 6, count_messages(key, ARCHIVED) is 6, not 0", _factory(CountsEveryStatus)),
    BrokenStore("llama-db-archive-the-newest", "archive_oldest_messages archives the newest messages",
                "an ORDER BY ... DESC left from a 'latest n' query", "oldest_messages_leave_first",
                "archive_oldest_messages(key, 2) returned", _factory(ArchivesTheNewest)),
]
