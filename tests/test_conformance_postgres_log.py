"""The PostgreSQL log store against the whole conformance suite, on a throwaway server:
the replica is a second pool on the same database. Run twice: a connection per call
from the pool (the default), and each handle holding one connection of its pool
(``hold_connection=True``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storetest import run_conformance

asyncpg = pytest.importorskip("asyncpg")

from reference_stores.postgres_log import SCHEMA, PostgresLogStore  # noqa: E402


async def postgres_log(storetest_postgres_url: str) -> AsyncIterator[PostgresLogStore]:
    pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=8)
    try:
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)  # idempotent, as an application's migration is
        yield PostgresLogStore(pool)
    finally:
        await pool.close()


async def postgres_log_held(storetest_postgres_url: str) -> AsyncIterator[PostgresLogStore]:
    pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)
        async with PostgresLogStore(pool, hold_connection=True) as store:
            yield store
    finally:
        await pool.close()


run_conformance(postgres_log, replica=postgres_log, name="postgres-log")
run_conformance(postgres_log_held, replica=postgres_log_held, name="postgres-log-held")
