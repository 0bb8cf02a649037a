"""AsyncPostgresSaver.setup() run by four savers at once on a fresh database fails
(``UniqueViolation`` on ``pg_type_typname_nsp_index``: ``CREATE TABLE IF NOT EXISTS``
racing itself, with no lock around the migrations), as four workers starting together
on a new database do. One run of four; the bounded loop tries up to 10 fresh
databases."""

from __future__ import annotations

import asyncio

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from storetest import databases
from storetest._engine.backends import fresh_fixtures


async def _round(url: str) -> list[BaseException]:
    async def one() -> None:
        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            await saver.setup()

    done = await asyncio.gather(*(one() for _ in range(4)), return_exceptions=True)
    return [e for e in done if isinstance(e, BaseException)]


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    for _ in range(10):
        with fresh_fixtures({"storetest_postgres_url": storetest_postgres_url}) as made:
            errors = asyncio.run(_round(made["storetest_postgres_url"]))
        if errors:
            assert any("UniqueViolation" in type(e).__name__ or "duplicate key" in str(e) for e in errors), errors
            return
    raise AssertionError("four setup() calls at once on a fresh database succeeded 10 times in a row")


if __name__ == "__main__":
    main()
