"""The same as ``database_fresh_backend.py``, on PostgreSQL (a new database each round)."""

from __future__ import annotations

from storetest import databases
from tests.ecosystem.repros.adk import database_fresh_backend


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    database_fresh_backend.rounds(storetest_postgres_url)


if __name__ == "__main__":
    main()
