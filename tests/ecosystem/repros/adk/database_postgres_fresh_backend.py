"""The same as ``database_fresh_backend.py``, on PostgreSQL (a new database each round)."""

from tests.ecosystem.repros.adk import database_fresh_backend


def main() -> None:
    database_fresh_backend.main("postgres")


if __name__ == "__main__":
    main()
