"""A broken Microsoft Agent Framework history provider on SQLite: the correct provider of
tests/history_providers.py (the control) committing each message on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storetest import history_providers
from tests.broken_stores import BrokenStore
from tests.history_providers import SQLiteHistoryProvider


class MessageByMessage(SQLiteHistoryProvider):
    """Commits each message of a batch on its own (INSERTs in autocommit): a process
    killed in the middle of a batch leaves part of it."""

    async def save_messages(self, session_id: str | None, messages: Any, *, state: Any = None, **kw: Any) -> None:
        key = str(session_id).encode("utf-8", "surrogatepass")
        for m in messages:
            self.db.execute("INSERT INTO messages (session, message) VALUES (?, ?)", (key, m.to_json()))


def message_by_message(tmp_path: Path) -> MessageByMessage:
    return MessageByMessage(tmp_path / "history.db")


_by_message = history_providers(message_by_message)

BROKEN = [
    BrokenStore("af-history-message-by-message", "each message of a batch committed on its own",
                "INSERTs in autocommit; commit() inside the loop", "items_survive_a_crash", "in part",
                _by_message, reopen=_by_message, racy=True),
]
