"""The PostgreSQL reference store against the whole conformance suite, in one call.

Two pools on one throwaway database: the store and its replica share data but not
connections, as two processes of one application would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storetest import run_conformance

asyncpg = pytest.importorskip("asyncpg")

from reference_stores.postgres import SCHEMA, PostgresStore  # noqa: E402


async def _store(storetest_postgres_url: str) -> AsyncIterator[PostgresStore]:
    pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=8)
    try:
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)  # idempotent, as an application's migration is
        yield PostgresStore(pool)
    finally:
        await pool.close()


async def reopen(storetest_postgres_url: str) -> AsyncIterator[PostgresStore]:
    """The crash clauses' second opening of the data: one connection, the schema already there."""
    pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=1)
    try:
        yield PostgresStore(pool)
    finally:
        await pool.close()


# Each call makes its own pool, so the replica is a second pool on the same database.
run_conformance(_store, replica=_store, name="postgres", reopen=reopen)
