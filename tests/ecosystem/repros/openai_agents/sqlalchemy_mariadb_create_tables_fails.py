"""SQLAlchemySession(create_tables=True) cannot create its tables on MySQL or MariaDB.

Its session id column is declared ``String`` with no length, and MySQL has no
``VARCHAR`` without one: the first call raises SQLAlchemy's ``CompileError`` ("VARCHAR
requires a length on dialect mysql") and nothing can be stored. Deterministic.

    python tests/ecosystem/repros/openai_agents/sqlalchemy_mariadb_create_tables_fails.py
"""

from __future__ import annotations

import asyncio
import secrets

from agents.extensions.memory import SQLAlchemySession
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.asyncio import create_async_engine

from storetest import databases


async def _first_add(url: str) -> str:
    engine = create_async_engine("mysql+aiomysql://" + url.split("://", 1)[1] + "?charset=utf8mb4")
    t = "_" + secrets.token_hex(4)  # tables of this run's own, in a database shared with other tests
    session = SQLAlchemySession("conversation", engine=engine, create_tables=True,
                                sessions_table=f"agent_sessions{t}", messages_table=f"agent_messages{t}")
    try:
        await session.add_items([{"role": "user", "content": "hello"}])
    except CompileError as exc:
        return str(exc)
    finally:
        await engine.dispose()
    raise AssertionError("create_tables=True made its tables on MariaDB, and add_items() succeeded")


def main(storetest_mysql_url: str | None = None) -> None:
    """Under pytest, on the test run's MariaDB; alone, on a throwaway server."""
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            return main(url)
    error = asyncio.run(_first_add(storetest_mysql_url))
    assert "VARCHAR requires a length" in error, error
    print(f"add_items() raised CompileError: {error}")


if __name__ == "__main__":
    main()
