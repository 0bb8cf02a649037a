"""Google ADK's session services (google-adk), judged through their own public API.

Each binding is one line for the author (``adk_sessions(outer factory)``); the outer
factories are top-level functions so that the clauses opening child processes or fresh
backends can import them. ``VertexAiSessionService`` is listed, not run: it stores
sessions in Vertex AI Agent Engine, which needs a Google Cloud project and credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storetest import adk_sessions
from tests.ecosystem.common import Contender, Defect

_SHARED: dict[str, Any] = {}


def in_memory(tmp_path: Path) -> Any:
    """One ``InMemorySessionService`` per directory: the replica is the same object (its
    backend is this process's memory; a second instance would be a second backend)."""
    from google.adk.sessions import InMemorySessionService

    return _SHARED.setdefault(str(tmp_path), InMemorySessionService())


def sqlite_service(tmp_path: Path) -> Any:
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    return SqliteSessionService(str(tmp_path / "adk.db"))


def database_on_sqlite(tmp_path: Path) -> Any:
    from google.adk.sessions import DatabaseSessionService

    return DatabaseSessionService(f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}")


def database_on_postgres(storetest_postgres_url: str) -> Any:
    from google.adk.sessions import DatabaseSessionService

    return DatabaseSessionService(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1))


memory_binding = adk_sessions(in_memory)
sqlite_binding = adk_sessions(sqlite_service)
database_sqlite_binding = adk_sessions(database_on_sqlite)
database_postgres_binding = adk_sessions(database_on_postgres)

CONTENDERS = [
    Contender("InMemorySessionService", "google-adk", lambda: memory_binding),
    Contender("SqliteSessionService (file)", "google-adk", lambda: sqlite_binding),
    Contender("DatabaseSessionService (SQLite, aiosqlite)", "google-adk", lambda: database_sqlite_binding),
    Contender("DatabaseSessionService (PostgreSQL, asyncpg)", "google-adk", lambda: database_postgres_binding,
              backends=("postgres",)),
    Contender("VertexAiSessionService", "google-adk", None,
              not_runnable="stores sessions in Vertex AI Agent Engine: needs a Google Cloud project, "
              "credentials and the network"),
]

DEFECTS: list[Defect] = []
