"""The same as ``database_order.py``, on PostgreSQL (asyncpg). Deterministic."""

from tests.ecosystem.repros.adk import database_order


def main() -> None:
    database_order.main("postgres")


if __name__ == "__main__":
    main()
