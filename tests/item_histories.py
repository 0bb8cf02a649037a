"""Correct item histories (the OpenAI Agents ``Session`` shape) for the tests: the
smallest one in memory, and one on a SQLite file that child processes can share."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any


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


#: Backends by directory: the two handles of one clause get the same tmp_path.
BACKENDS: dict[str, tuple[asyncio.Lock, dict[str, list[Any]]]] = {}


def memory_sessions(tmp_path: Path) -> Any:
    """The outer factory: one backend per clause's directory, an opener onto it."""
    backend = BACKENDS.setdefault(str(tmp_path), (asyncio.Lock(), {}))
    return lambda session_id: MemorySession(backend, session_id)
