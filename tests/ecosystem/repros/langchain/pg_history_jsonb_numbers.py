"""langchain-postgres PostgresChatMessageHistory stores each message in a ``jsonb``
column, which keeps numbers as ``numeric``: the float ``1e300`` in a message's
``response_metadata`` (or a tool call's ``args``) comes back as a 301-digit integer
(items_round_trip_exactly: LangChain's own ``message_to_dict`` keeps the float)."""

import uuid

import psycopg
from langchain_core.messages import AIMessage
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
        history.add_messages([AIMessage("", response_metadata={"n": 1e300})])
        (got,) = history.messages
        n = got.response_metadata["n"]
        assert type(n) is int and n == 10**300, f"the float came back as {type(n).__name__} {n!r}"


if __name__ == "__main__":
    main()
