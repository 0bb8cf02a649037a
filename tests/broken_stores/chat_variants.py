"""Broken LangChain chat histories: a correct in-memory history (``MemoryChatHistory``,
which passes every clause of its binding: ``tests/test_chat_histories.py``) changed in
one place each, to carry one bug seen in LangChain's own histories."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from storetest import chat_histories
from tests.broken_stores import BrokenStore

_BACKENDS: dict[str, tuple[threading.Lock, dict[str, list[Any]]]] = {}


class MemoryChatHistory(BaseChatMessageHistory):
    """Correct: each session's messages as ``message_to_dict`` JSON under one lock."""

    def __init__(self, tmp_path: Path, session_id: str) -> None:
        self.session_id = session_id
        self.lock, self.histories = _BACKENDS.setdefault(str(tmp_path), (threading.Lock(), {}))

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        with self.lock:
            return messages_from_dict([json.loads(m) for m in self.histories.get(self.session_id, [])])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        rows = [json.dumps(message_to_dict(m)) for m in messages]
        with self.lock:
            self.histories.setdefault(self.session_id, []).extend(rows)

    def clear(self) -> None:
        with self.lock:
            self.histories.pop(self.session_id, None)


class MessageByMessage(MemoryChatHistory):
    """``add_messages`` left to ``BaseChatMessageHistory``'s default: one ``add_message``
    (one ``LPUSH``, one commit) per message."""

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        for message in messages:
            super().add_messages([message])
            time.sleep(0)  # the round trip to the server between two messages


class ToolArgumentsReserialized(MemoryChatHistory):
    """Parses the raw tool-call arguments in ``additional_kwargs`` and dumps them again
    (a ``jsonb`` column, a converter that normalizes tool calls)."""

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        super().add_messages([_reserialized(m) for m in messages])


def _reserialized(message: BaseMessage) -> BaseMessage:
    calls = message.additional_kwargs.get("tool_calls")
    if not isinstance(calls, list):
        return message
    again = []
    for call in calls:
        try:
            raw = json.dumps(json.loads(call["function"]["arguments"]))
        except (KeyError, TypeError, ValueError):
            raw = None
        again.append(call if raw is None else {**call, "function": {**call["function"], "arguments": raw}})
    return message.model_copy(update={"additional_kwargs": {**message.additional_kwargs, "tool_calls": again}})


class SharedList(MemoryChatHistory):
    """Keeps the message objects it was given and returns its own list of them
    (``InMemoryChatMessageHistory``'s ``messages``)."""

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        with self.lock:
            return self.histories.setdefault(self.session_id, [])  # type: ignore[no-any-return]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        with self.lock:
            self.histories.setdefault(self.session_id, []).extend(messages)


class SortKeyPrefix(MemoryChatHistory):
    """One row per message, partition key ``HISTORY`` and sort key ``SESSION#<id>#<n>``,
    read back with ``begins_with(SESSION#<id>#)``: session ``x`` also reads the messages
    of ``x#y`` (the separator inside an id is not escaped). Cleared the same way.

    In the wild: DynamoDB single-table designs (``begins_with`` on a ``#``-joined sort
    key); any key-value prefix scan whose separator the ids may hold.
    """

    def _prefix(self) -> str:
        return f"SESSION#{self.session_id}#"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        with self.lock:
            rows = sorted(((k, n), m) for k, ms in self.histories.items() if (k + "#").startswith(self._prefix())
                          for n, m in enumerate(ms))
            return messages_from_dict([json.loads(m) for _, m in rows])

    def clear(self) -> None:
        with self.lock:
            for key in [k for k in self.histories if (k + "#").startswith(self._prefix())]:
                self.histories.pop(key)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        rows = [json.dumps(message_to_dict(m)) for m in messages]
        with self.lock:
            self.histories.setdefault(f"SESSION#{self.session_id}", []).extend(rows)


class ClearByLike(MemoryChatHistory):
    """``clear`` deletes ``WHERE session_id LIKE ?`` with the id as the pattern, where
    ``=`` was meant: SQLite's and MySQL's ``LIKE`` ignore ASCII case (and read ``%`` and
    ``_`` as wildcards), so clearing ``Case`` also clears ``case``. Reads are exact."""

    def clear(self) -> None:
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in self.session_id)
        with self.lock:
            for key in [k for k in self.histories if re.fullmatch(pattern, k, re.IGNORECASE | re.ASCII | re.DOTALL)]:
                self.histories.pop(key)


def _opener(cls: type[MemoryChatHistory]) -> Callable[..., Any]:
    def outer(tmp_path: Path) -> Callable[[str], MemoryChatHistory]:
        return lambda session_id: cls(tmp_path, session_id)

    outer.__name__ = outer.__qualname__ = f"{cls.__name__}_histories"
    return outer


def memory_chat(tmp_path: Path) -> Callable[[str], MemoryChatHistory]:
    """The correct history's outer factory."""
    return lambda session_id: MemoryChatHistory(tmp_path, session_id)


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, cls: type[MemoryChatHistory],
            racy: bool = False) -> BrokenStore:
    return BrokenStore(name, bug, wild, clause, diagnosis, chat_histories(_opener(cls)), racy=racy)


BROKEN = [
    _broken("chat-batch-message-by-message", "add_messages writes one message at a time",
            "LangChain RedisChatMessageHistory (BaseChatMessageHistory's default add_messages)",
            "a_batch_is_atomic_to_readers", "beyond the protocol's promise: ",
            MessageByMessage, racy=True),
    _broken("chat-tool-arguments-reserialized", "raw tool-call arguments parsed and dumped again",
            "a jsonb column; a converter normalizing tool calls", "items_round_trip_exactly",
            "raw JSON re-encoded", ToolArgumentsReserialized),
    _broken("chat-sort-key-prefix-under-hash", "messages read by a sort-key prefix SESSION#<id>#",
            "DynamoDB single-table designs (begins_with on a #-joined key)", "item_related_ids_stay_apart",
            "sessions share items", SortKeyPrefix),
    _broken("chat-clear-by-like", "clear() deletes WHERE session_id LIKE <id>, which ignores ASCII case",
            "a LIKE where = was meant (SQLite's and MySQL's LIKE are case-insensitive)", "clear_session_empties_it",
            "(case)", ClearByLike),
    _broken("chat-shared-list", "messages returns the history's own list of the caller's messages",
            "LangChain InMemoryChatMessageHistory", "items_are_not_aliased",
            "beyond the protocol's promise: the caller changing", SharedList),
]


class CheckThenCreateTable(BaseChatMessageHistory):
    """A history on a SQLite file whose constructor creates its table by looking for it
    in ``sqlite_master``, then ``CREATE TABLE`` (the shape of LangChain's
    ``SQLChatMessageHistory``, whose constructor calls SQLAlchemy's ``create_all``):
    two constructors on a fresh file both find no table, and the second ``CREATE``
    raises "table message_store already exists"."""

    def __init__(self, path: Path, session_id: str) -> None:
        self.session_id = session_id
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        found = self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'message_store'")
        if found.fetchone() is None:
            self.db.execute("CREATE TABLE message_store (id INTEGER PRIMARY KEY, session_id TEXT, message TEXT)")

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        rows = self.db.execute("SELECT message FROM message_store WHERE session_id = ? ORDER BY id",
                               (self.session_id,)).fetchall()
        return messages_from_dict([json.loads(r[0]) for r in rows])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        rows = [(self.session_id, json.dumps(message_to_dict(m))) for m in messages]
        self.db.execute("BEGIN IMMEDIATE")
        self.db.executemany("INSERT INTO message_store (session_id, message) VALUES (?, ?)", rows)
        self.db.execute("COMMIT")

    def clear(self) -> None:
        self.db.execute("DELETE FROM message_store WHERE session_id = ?", (self.session_id,))

    def close(self) -> None:
        self.db.close()


def check_then_create_histories(tmp_path: Path) -> Callable[[str], CheckThenCreateTable]:
    return lambda session_id: CheckThenCreateTable(tmp_path / "chat.db", session_id)


BROKEN.append(BrokenStore(
    "chat-constructor-check-then-create", "the constructor looks for its table, then creates it",
    "LangChain SQLChatMessageHistory (create_all in the constructor)", "first_calls_on_a_fresh_backend_succeed",
    "already exists", chat_histories(check_then_create_histories), racy=True))
