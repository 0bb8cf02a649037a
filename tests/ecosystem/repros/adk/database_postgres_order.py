"""The same as ``database_order.py``, on PostgreSQL (asyncpg). Deterministic."""

from __future__ import annotations

from storetest import databases
from tests.ecosystem.repros.adk import database_order


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    database_order.run_on(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1))


if __name__ == "__main__":
    main()
