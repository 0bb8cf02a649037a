"""Broken Microsoft Agent Framework history providers: a correct in-memory provider
(``MemoryHistoryProvider``, which passes every clause of its binding:
tests/test_broken_stores.py's control) changed in one place each, to carry one bug a
history provider can have."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_framework import HistoryProvider, Message

from storetest import history_providers
from tests.broken_stores import BrokenStore

#: Backends by directory and event loop (an asyncio.Lock belongs to one loop).
_BACKENDS: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock, dict[str, list[str]]]] = {}


class MemoryHistoryProvider(HistoryProvider):
    """Correct: each session's messages as ``to_json()`` text under one lock, with a
    yield inside it (a round trip)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__("memory_history")
        loop = asyncio.get_running_loop()
        known = _BACKENDS.get(str(tmp_path))
        if known is None or known[0] is not loop:
            known = _BACKENDS[str(tmp_path)] = (loop, asyncio.Lock(), {})
        _, self.lock, self.histories = known

    def key(self, session_id: str | None) -> str:
        return str(session_id)

    async def get_messages(self, session_id: str | None, *, state: Any = None, **kwargs: Any) -> list[Message]:
        async with self.lock:
            await asyncio.sleep(0)
            return [Message.from_json(m) for m in self.histories.get(self.key(session_id), [])]

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *, state: Any = None,
                            **kwargs: Any) -> None:
        rows = [m.to_json() for m in messages]
        async with self.lock:
            await asyncio.sleep(0)
            self.histories.setdefault(self.key(session_id), []).extend(rows)


class NewestFirst(MemoryHistoryProvider):
    """``ORDER BY created DESC`` (a UI's order) where the history's order was meant."""

    async def get_messages(self, session_id: str | None, *, state: Any = None, **kwargs: Any) -> list[Message]:
        return list(reversed(await super().get_messages(session_id, state=state)))


class ArgumentsReserialized(MemoryHistoryProvider):
    """Function-call ``arguments`` parsed and dumped again (a ``jsonb`` column, a
    converter that normalizes tool calls)."""

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *, state: Any = None,
                            **kwargs: Any) -> None:
        for message in messages:
            for content in message.contents:
                if content.type == "function_call" and isinstance(content.arguments, str):
                    try:
                        content.arguments = json.dumps(json.loads(content.arguments))
                    except ValueError:
                        pass
        await super().save_messages(session_id, messages, state=state)


class CaseFoldedIds(MemoryHistoryProvider):
    """Session ids compared case-insensitively (a MariaDB collation, ``LOWER(id)`` keys)."""

    def key(self, session_id: str | None) -> str:
        return str(session_id).lower()


class ReadModifyWrite(MemoryHistoryProvider):
    """Reads the history, appends, writes it back, with no lock across (a JSON document
    per session rewritten whole): concurrent saves lose each other's messages."""

    async def save_messages(self, session_id: str | None, messages: Sequence[Message], *, state: Any = None,
                            **kwargs: Any) -> None:
        stored = list(self.histories.get(self.key(session_id), []))
        await asyncio.sleep(0)  # the round trip between the read and the write
        self.histories[self.key(session_id)] = stored + [m.to_json() for m in messages]


class PerProviderMemory(MemoryHistoryProvider):
    """Keeps the history in the provider object (a dict attribute): a second provider
    on the same backend, another worker, sees none of it."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.histories = {}


def memory_history(tmp_path: Path) -> MemoryHistoryProvider:
    """The correct provider's outer factory."""
    return MemoryHistoryProvider(tmp_path)


def _factory(cls: type[MemoryHistoryProvider]) -> Any:
    def outer(tmp_path: Path) -> MemoryHistoryProvider:
        return cls(tmp_path)

    outer.__name__ = outer.__qualname__ = f"{cls.__name__}_provider"
    return outer


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, cls: type[MemoryHistoryProvider],
            racy: bool = False) -> BrokenStore:
    return BrokenStore(name, bug, wild, clause, diagnosis, history_providers(_factory(cls)), racy=racy)


BROKEN = [
    _broken("af-history-newest-first", "get_messages returns the newest message first",
            "ORDER BY created DESC, a UI's order reused", "items_keep_their_order", "newest first", NewestFirst),
    _broken("af-history-arguments-reserialized", "function-call arguments parsed and dumped again",
            "a jsonb column; a converter normalizing tool calls", "items_round_trip_exactly",
            "raw JSON re-encoded", ArgumentsReserialized),
    _broken("af-history-case-folded-ids", "session ids compared case-insensitively",
            "MariaDB's default collation; LOWER(id) keys", "item_sessions_are_isolated", "case",
            CaseFoldedIds),
    _broken("af-history-read-modify-write", "save_messages reads, appends and writes back with no lock",
            "a JSON document per session rewritten whole (a blob, a file, a Cosmos item)",
            "concurrent_adds_lose_nothing", "lost", ReadModifyWrite, racy=True),
    _broken("af-history-per-provider-memory", "the history kept in the provider object",
            "a dict attribute on the provider; a cache never invalidated",
            "item_replicas_see_each_others_writes", "lost", PerProviderMemory),
]
