"""DatabaseSessionService: services starting together on a fresh database fail their
first calls (each creates the tables on first use: "table adk_internal_metadata already
exists" on SQLite, "duplicate key value violates unique constraint
pg_type_typname_nsp_index" on PostgreSQL).

A provoked race: each round opens four services on a new database and makes their
first calls at once; :func:`main` returns at the first round where a call raised, and
gives up after ``ROUNDS`` (the miss rate is in ``tests/ecosystem/adk.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from google.adk.sessions import DatabaseSessionService

from storetest._engine.backends import fresh_fixtures

ROUNDS = 10


async def first_calls(url: str, services: int = 4) -> list[str]:
    """The errors of ``services`` services' first calls at once on the database ``url``."""
    opened = [DatabaseSessionService(url) for _ in range(services)]

    async def first(k: int) -> str:
        try:
            await opened[k].create_session(app_name="app", user_id="u", session_id=f"s{k}")
            return ""
        except Exception as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"

    try:
        return [e for e in await asyncio.gather(*(first(k) for k in range(services))) if e]
    finally:
        for service in opened:
            await service.close()


@contextlib.contextmanager
def fresh(server_url: str | None) -> Iterator[str]:
    """A new, empty database's URL for DatabaseSessionService: a SQLite file, or with
    ``server_url`` a new database on that PostgreSQL server."""
    if server_url is not None:
        with fresh_fixtures({"storetest_postgres_url": server_url}) as made:
            yield made["storetest_postgres_url"].replace("postgresql://", "postgresql+asyncpg://", 1)
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite+aiosqlite:///{Path(tmp) / 'adk.db'}"


def rounds(server_url: str | None = None) -> None:
    """Up to ``ROUNDS`` rounds on new databases; returns at the first that raised."""
    for _ in range(ROUNDS):
        with fresh(server_url) as url:
            errors = asyncio.run(first_calls(url))
        if errors:  # "already exists", "duplicate key", or "Schema version not found" (read mid-creation)
            return
    raise AssertionError(f"{ROUNDS} rounds of four first calls on a fresh database all succeeded")


def main() -> None:
    rounds()


if __name__ == "__main__":
    main()
