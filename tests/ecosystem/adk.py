"""Google ADK's session services (google-adk), judged through their own public API.

Each binding is one line for the author (``adk_sessions(outer factory)``) over an outer
factory defined at the top level of this module; nothing here imports ADK at import
time (each factory imports what it needs when called). ``VertexAiSessionService`` is listed, not run: it stores
sessions in Vertex AI Agent Engine, which needs a Google Cloud project and credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storetest import adk_sessions
from tests.ecosystem.common import Contender, Defect

PROJECT = "google-adk"
TITLE = "Google ADK (`google-adk`)"
#: The import names the services need (tests/ecosystem/test_repros.py skips or fails without them).
REQUIRES = ("google.adk", "sqlalchemy", "aiosqlite", "asyncpg")
#: What installs every contender's dependencies.
INSTALL = "pip install -e '.[adk]'"
#: The distributions whose versions the table records.
DISTRIBUTIONS = ("google-adk", "google-genai", "sqlalchemy", "aiosqlite", "asyncpg")

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
    Contender("InMemorySessionService", PROJECT, lambda: memory_binding),
    Contender("SqliteSessionService (file)", PROJECT, lambda: sqlite_binding),
    Contender("DatabaseSessionService (SQLite, aiosqlite)", PROJECT, lambda: database_sqlite_binding),
    Contender("DatabaseSessionService (PostgreSQL, asyncpg)", PROJECT, lambda: database_postgres_binding,
              backends=("postgres",)),
    Contender("VertexAiSessionService", PROJECT, None,
              not_runnable="stores sessions in Vertex AI Agent Engine: needs a Google Cloud project, "
              "credentials and the network"),
]

_MEMORY, _SQLITE = "InMemorySessionService", "SqliteSessionService (file)"
_DB_SQLITE, _DB_POSTGRES = "DatabaseSessionService (SQLite, aiosqlite)", "DatabaseSessionService (PostgreSQL, asyncpg)"
_RACE = ("below 1 in 10,000: every one of 200 rounds on SQLite and 100 on PostgreSQL failed (598 of 800 and "
         "300 of 400 first calls), and the repro tries up to 10 rounds")

DEFECTS = [
    Defect(_MEMORY, "adk_sessions_are_isolated", "session ids stripped of spaces: 'abc ' is session 'abc' (its "
           "create raises AlreadyExistsError, its read returns 'abc''s events)",
           "tests/ecosystem/repros/adk/in_memory_ids_stripped.py", True),
    Defect(_SQLITE, "adk_sessions_are_isolated", "session ids stripped of spaces: 'abc ' is session 'abc'",
           "tests/ecosystem/repros/adk/sqlite_ids_stripped.py", True),
    # The input model's whitespace relation ('\tx' beside 'x') meets the same strip().
    Defect(_MEMORY, "adk_related_ids_stay_apart", "session ids stripped of whitespace: '\\tabc' is session 'abc'",
           "tests/ecosystem/repros/adk/in_memory_ids_stripped.py", True),
    Defect(_SQLITE, "adk_related_ids_stay_apart", "session ids stripped of whitespace: '\\tabc' is session 'abc'",
           "tests/ecosystem/repros/adk/sqlite_ids_stripped.py", True),
    Defect(_SQLITE, "adk_events_keep_append_order", "events read in timestamp order: an event appended with an "
           "earlier timestamp (a replica's clock behind) comes back before those appended before it",
           "tests/ecosystem/repros/adk/sqlite_order_by_timestamp.py", True),
    Defect(_DB_SQLITE, "adk_events_keep_append_order", "events read by timestamp, then id: events of one clock "
           "tick come back in the order of their ids", "tests/ecosystem/repros/adk/database_order.py", True),
    Defect(_DB_SQLITE, "adk_first_calls_on_a_fresh_backend_succeed", "services starting together on a fresh "
           "database fail their first calls ('table adk_internal_metadata already exists')",
           "tests/ecosystem/repros/adk/database_fresh_backend.py", False, _RACE),
    Defect(_DB_POSTGRES, "adk_events_keep_nul_characters", "a NUL in an event's text, argument or state is refused "
           "('unsupported Unicode escape sequence', jsonb); SQLite keeps it",
           "tests/ecosystem/repros/adk/database_postgres_nul.py", True),
    Defect(_DB_POSTGRES, "adk_events_keep_append_order", "events read by timestamp, then id: events of one clock "
           "tick come back in the order of their ids", "tests/ecosystem/repros/adk/database_postgres_order.py", True),
    Defect(_DB_POSTGRES, "adk_first_calls_on_a_fresh_backend_succeed", "services starting together on a fresh "
           "database fail their first calls ('duplicate key value violates unique constraint "
           "pg_type_typname_nsp_index')", "tests/ecosystem/repros/adk/database_postgres_fresh_backend.py", False,
           _RACE),
]
