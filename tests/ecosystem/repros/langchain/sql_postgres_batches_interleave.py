"""SQLChatMessageHistory on PostgreSQL: two replicas' concurrent add_messages batches on
one session interleave (concurrent_batches_never_interleave, beyond LangChain's
documented promise). Each batch is one transaction, but rows are read back ``ORDER BY
id``, a ``SERIAL`` that concurrent inserts draw from in turn.

Deterministic, through the application's own engines (``connection=engine``): replica
one's engine sends one INSERT per row (``insertmanyvalues_page_size=1``, a public
``create_engine`` option), and an ``after_cursor_execute`` listener on it lets replica
two add and commit its whole batch after the first row of replica one's batch, inside
replica one's open transaction. Replica one's later rows draw later ids."""

import secrets
from typing import Any

from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.messages import HumanMessage
from sqlalchemy import Engine, create_engine, event

from storetest import databases


def pause_after_first_insert(engine: Engine, meanwhile: Any) -> None:
    """Run ``meanwhile()`` once, after the first INSERT into message_store on ``engine``."""
    pending = [meanwhile]

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if pending and statement.lstrip().upper().startswith("INSERT INTO MESSAGE_STORE"):
            pending.pop()()


def interleaved_batches(url: str, session: str = "s") -> list[str]:
    """Replica one's batch with replica two's added after its first row; the messages read back."""
    url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    one_engine, two_engine = create_engine(url, insertmanyvalues_page_size=1), create_engine(url)
    try:
        one = SQLChatMessageHistory(session, connection=one_engine)
        two = SQLChatMessageHistory(session, connection=two_engine)
        # Replica two on its own engine and connection: it commits while replica one's
        # transaction is open (the rows do not conflict, so it does not wait).
        pause_after_first_insert(one_engine, lambda: two.add_messages([HumanMessage(f"two #{i}") for i in range(2)]))
        one.add_messages([HumanMessage(f"one #{i}") for i in range(2)])
        return [str(m.content) for m in one.messages]
    finally:
        one_engine.dispose()
        two_engine.dispose()


def main(storetest_postgres_url: str | None = None) -> None:
    """Under pytest, on the test run's PostgreSQL; alone, on a throwaway server."""
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    got = interleaved_batches(storetest_postgres_url, f"s-{secrets.token_hex(4)}")
    assert got == ["one #0", "two #0", "two #1", "one #1"], f"the batches did not interleave: {got}"


if __name__ == "__main__":
    main()
