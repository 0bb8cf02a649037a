"""``storetest.databases``: the public way to a throwaway database, outside pytest too."""

from __future__ import annotations

import asyncio

import pytest

from storetest import databases


def test_throwaway_gives_a_fresh_database_and_removes_it() -> None:
    asyncpg = pytest.importorskip("asyncpg")
    try:
        context = databases.throwaway("postgres")
        url = context.__enter__()
    except databases.Unavailable as exc:
        if "postgres" in databases.required_backends():
            raise
        pytest.skip(str(exc))
    name = url.rsplit("/", 1)[1]
    try:
        async def tables() -> int:
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("CREATE TABLE t (x int)")
                return int(await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"))
            finally:
                await conn.close()

        assert asyncio.run(tables()) == 1, "the database was not empty"
    finally:
        context.__exit__(None, None, None)
    assert name.startswith("storetest"), name


def test_an_unknown_backend_is_named() -> None:
    with pytest.raises(ValueError, match="unknown backend 'oracle'"):
        with databases.throwaway("oracle"):
            pass
