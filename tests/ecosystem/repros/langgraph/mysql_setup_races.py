"""langgraph-checkpoint-mysql 3.0.0's asyncmy saver (``AsyncMySaver``, on MariaDB):
``setup()`` run by four savers at once on a fresh database fails (``IntegrityError:
Duplicate entry '0' for key 'PRIMARY'``: each reads the migration table, finds it
empty, and inserts migration 0), as four workers starting together on a new database
do. One run of four; the bounded loop tries up to 10 fresh databases."""

from __future__ import annotations

import asyncio

from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver

from storetest import databases
from storetest._engine.backends import fresh_fixtures


async def _round(url: str) -> list[BaseException]:
    async def one() -> None:
        async with AsyncMySaver.from_conn_string(url) as saver:
            await saver.setup()

    done = await asyncio.gather(*(one() for _ in range(4)), return_exceptions=True)
    return [e for e in done if isinstance(e, BaseException)]


def main(storetest_mysql_url: str | None = None) -> None:
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            main(url)
        return
    for _ in range(10):
        with fresh_fixtures({"storetest_mysql_url": storetest_mysql_url}) as made:
            errors = asyncio.run(_round(made["storetest_mysql_url"]))
        if errors:
            assert any("Duplicate entry" in str(e) or "already exists" in str(e) for e in errors), errors
            return
    raise AssertionError("four setup() calls at once on a fresh database succeeded 10 times in a row")


if __name__ == "__main__":
    main()
