"""Broken Microsoft Agent Framework session stores (whole sessions: get, set, delete): a
correct in-memory store (``MemorySessionStore``, which passes every clause of its
binding: tests/test_broken_stores.py's control) changed in one place each."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent_framework import AgentSession

from storetest import session_stores
from tests.broken_stores import BrokenStore

_BACKENDS: dict[str, dict[str, Any]] = {}


class MemorySessionStore:
    """Correct: each session one JSON text of ``AgentSession.to_dict()``, replaced whole."""

    def __init__(self, tmp_path: Path) -> None:
        self.sessions = _BACKENDS.setdefault(str(tmp_path), {})

    async def get(self, session_id: str) -> AgentSession | None:
        text = self.sessions.get(session_id)
        await asyncio.sleep(0)  # a round trip: other callers run here
        return None if text is None else AgentSession.from_dict(json.loads(text))

    async def set(self, session_id: str, session: AgentSession) -> None:
        text = json.dumps(session.to_dict())
        await asyncio.sleep(0)
        self.sessions[session_id] = text

    async def delete(self, session_id: str) -> None:
        await asyncio.sleep(0)
        self.sessions.pop(session_id, None)


class EmptiedThenWritten(MemorySessionStore):
    """``set`` deletes the old snapshot, then writes the new one in a second step (two
    statements, no transaction): a reader between them finds no session."""

    async def set(self, session_id: str, session: AgentSession) -> None:
        self.sessions.pop(session_id, None)
        await super().set(session_id, session)


class DeleteByPrefix(MemorySessionStore):
    """``delete`` removes every key starting with the id (``SCAN MATCH id*``, ``LIKE 'id%'``)."""

    async def delete(self, session_id: str) -> None:
        await asyncio.sleep(0)
        for key in [k for k in self.sessions if k.startswith(session_id)]:
            del self.sessions[key]


class DeleteUnderDot(MemorySessionStore):
    """``delete`` removes the session and every key under ``<id>.`` (sessions kept as
    dotted paths, a parent's child sessions deleted with it; a ``Prefix=`` listing):
    deleting ``x`` also deletes ``x.y``. The old delete clause's ids (``x:messages``,
    ``X``, ``x*``, a trailing space) never showed it."""

    async def delete(self, session_id: str) -> None:
        await asyncio.sleep(0)
        for key in [k for k in self.sessions if k == session_id or k.startswith(f"{session_id}.")]:
            del self.sessions[key]


class MessagesOneByOne(MemorySessionStore):
    """``set`` keeps the session's messages as rows of their own and writes them one per
    round trip (``RPUSH`` per message after a ``DEL``): a ``delete`` landing between two
    of them leaves the rest of the messages as a session."""

    async def get(self, session_id: str) -> AgentSession | None:
        await asyncio.sleep(0)
        rows = self.sessions.get(session_id)
        if rows is None:
            return None
        session = AgentSession(session_id=session_id)
        session.state = {"in_memory": {"messages": [AgentSession.from_dict(json.loads(r)).state["m"] for r in rows]}}
        return session

    async def set(self, session_id: str, session: AgentSession) -> None:
        messages = session.state.get("in_memory", {}).get("messages", [])
        self.sessions[session_id] = []
        for message in messages:
            row = AgentSession(session_id=session_id)
            row.state = {"m": message}
            text = json.dumps(row.to_dict())
            await asyncio.sleep(0)
            self.sessions.setdefault(session_id, []).append(text)


def memory_sessions(tmp_path: Path) -> MemorySessionStore:
    """The correct store's outer factory."""
    return MemorySessionStore(tmp_path)


def _factory(cls: type[MemorySessionStore]) -> Any:
    def outer(tmp_path: Path) -> MemorySessionStore:
        return cls(tmp_path)

    outer.__name__ = outer.__qualname__ = f"{cls.__name__}_store"
    return outer


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, cls: type[MemorySessionStore],
            racy: bool = False) -> BrokenStore:
    return BrokenStore(name, bug, wild, clause, diagnosis, session_stores(_factory(cls)), racy=racy)


BROKEN = [
    _broken("af-sessions-emptied-then-written", "set deletes the old snapshot, then writes the new one",
            "DELETE then INSERT without a transaction; a file unlinked before it is rewritten",
            "concurrent_saves_leave_one_transcript", "empty transcript", EmptiedThenWritten, racy=True),
    _broken("af-sessions-delete-by-prefix", "delete removes every key starting with the id",
            "SCAN MATCH id* then DEL; DELETE ... WHERE id LIKE 'id%'", "delete_removes_the_session",
            "changed session", DeleteByPrefix),
    _broken("af-sessions-delete-under-dot", "delete removes the keys under <id>. too",
            "sessions as dotted paths, children deleted with their parent; a Prefix= listing",
            "delete_removes_the_session", "(x and x.y)", DeleteUnderDot),
    _broken("af-sessions-messages-one-by-one", "set writes the messages one round trip each",
            "a Redis list (DEL, then RPUSH per message); a row per message in autocommit",
            "delete_racing_save_leaves_gone_or_whole", "neither gone nor", MessagesOneByOne, racy=True),
]
