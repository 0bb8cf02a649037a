"""langchain-postgres PostgresChatMessageHistory refuses a message holding a NUL
character (its ``jsonb`` column: "unsupported Unicode escape sequence") and does not roll
back: the caller's connection stays in the failed transaction, and every later call on
it, for any session, raises ``InFailedSqlTransaction`` (items_keep_nul_characters)."""

import uuid

import psycopg
from langchain_core.messages import HumanMessage
from langchain_postgres import PostgresChatMessageHistory

from storetest import databases


def main(storetest_postgres_url: str | None = None) -> None:
    """Under pytest, on the test run's PostgreSQL; alone, on a throwaway server."""
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    with psycopg.connect(storetest_postgres_url) as connection:
        PostgresChatMessageHistory.create_tables(connection, "chat_history")
        history = PostgresChatMessageHistory("chat_history", str(uuid.uuid4()), sync_connection=connection)
        try:
            history.add_messages([HumanMessage("a\x00b")])
        except psycopg.errors.UntranslatableCharacter:
            pass
        else:
            raise AssertionError("a message with a NUL was stored")
        other = PostgresChatMessageHistory("chat_history", str(uuid.uuid4()), sync_connection=connection)
        try:
            other.add_messages([HumanMessage("no NUL here")])
        except psycopg.errors.InFailedSqlTransaction:
            return
        raise AssertionError("the connection was usable after the refused message")


if __name__ == "__main__":
    main()
