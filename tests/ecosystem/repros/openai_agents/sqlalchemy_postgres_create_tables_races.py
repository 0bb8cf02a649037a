"""SQLAlchemySession(create_tables=True) on PostgreSQL: a session's first call raises
'relation "agent_sessions" already exists' when another process creates the tables
between its check and its ``CREATE TABLE`` (adds_from_processes_land_whole: writers in
several processes making their first calls at once; racing closer, PostgreSQL's own
catalog refuses the second type, 'duplicate key value violates unique constraint
"pg_type_typname_nsp_index"').

``create_tables=True`` runs SQLAlchemy's ``create_all``, which looks for each table, then
issues ``CREATE TABLE`` (no ``IF NOT EXISTS``), under a lock that holds within one
process only. Deterministic: a ``before_cursor_execute`` listener on our engine, just
before its first ``CREATE TABLE`` runs, lets another session in another process make
its first call, which creates the tables. Table names of its own (``sessions_table=``, ``messages_table=``, constructor
parameters) make the database fresh for it.

    python tests/ecosystem/repros/openai_agents/sqlalchemy_postgres_create_tables_races.py
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from typing import Any

from agents.extensions.memory import SQLAlchemySession
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import IntegrityError, ProgrammingError
from sqlalchemy.ext.asyncio import create_async_engine

from storetest import databases

#: The other process: a session on its own engine makes its first call.
OTHER = """
import asyncio, sys
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine

async def first_call(url, sessions_table, messages_table):
    engine = create_async_engine(url)
    try:
        await SQLAlchemySession("other", engine=engine, create_tables=True, sessions_table=sessions_table,
                                messages_table=messages_table).add_items([{"role": "user", "content": "hi"}])
    finally:
        await engine.dispose()

asyncio.run(first_call(*sys.argv[1:]))
"""


async def _race(url: str, tables: dict[str, str]) -> str:
    engine = create_async_engine(url)
    done: list[bool] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def the_other_process_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE") and not done:
            done.append(True)
            # A process, as in the clause: the session's own lock is per process, keyed by table names.
            subprocess.run([sys.executable, "-c", OTHER, url, tables["sessions_table"], tables["messages_table"]],
                           check=True, timeout=120)

    try:
        session = SQLAlchemySession("s", engine=engine, create_tables=True, **tables)
        await session.add_items([{"role": "user", "content": "hello"}])
    except (ProgrammingError, IntegrityError) as exc:
        return str(exc.orig)
    finally:
        await engine.dispose()
    assert done, "the session made no CREATE TABLE"
    return ""


def main(storetest_postgres_url: str | None = None) -> None:
    """Under pytest, on the test run's PostgreSQL; alone, on a throwaway server."""
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    suffix = secrets.token_hex(4)
    tables = {"sessions_table": f"agent_sessions_{suffix}", "messages_table": f"agent_messages_{suffix}"}
    try:
        error = asyncio.run(_race(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1),
                                  tables))
    finally:
        cleanup = create_engine(storetest_postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
        with cleanup.begin() as conn:
            for table in (tables["messages_table"], tables["sessions_table"]):
                conn.execute(text(f'DROP TABLE IF EXISTS "{table}" CASCADE'))
        cleanup.dispose()
    assert "already exists" in error or "pg_type_typname_nsp_index" in error, (
        f"add_items() after another process created the tables: {error or 'no error'}")
    print(f"add_items() raised: {error}")


if __name__ == "__main__":
    main()
