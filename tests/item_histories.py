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
