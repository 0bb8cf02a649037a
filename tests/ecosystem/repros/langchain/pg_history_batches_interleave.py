"""langchain-postgres PostgresChatMessageHistory: two replicas' concurrent add_messages
batches on one session interleave (concurrent_batches_never_interleave, beyond
LangChain's documented promise). Each batch is one transaction, but rows are read back
``ORDER BY id``, a ``SERIAL`` that concurrent inserts draw from in turn.

Deterministic, through the application's own connection (``sync_connection=``):
add_messages sends one INSERT per row (psycopg's ``executemany``), and psycopg adapts
each row's parameters just before sending it. A string dumper registered on replica
one's connection (``connection.adapters.register_dumper``, public psycopg API), when it
adapts the second row, waits until the first row has drawn its id (the sequence's
``last_value``, which other sessions see at once), then lets replica two add and commit
its whole batch on its own connection. Replica one's second row draws a later id."""

import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from langchain_core.messages import HumanMessage
from langchain_postgres import PostgresChatMessageHistory
from psycopg.types.string import StrDumperUnknown

from storetest import databases


def hook_before(connection: psycopg.Connection[Any], marker: str, then: Callable[[], None]) -> None:
    """Run ``then()`` once, when ``connection`` adapts a string containing ``marker``."""
    pending = [then]

    class Hook(StrDumperUnknown):
        def dump(self, obj: str) -> Any:
            if pending and marker in obj:
                pending.pop()()
            return super().dump(obj)

    connection.adapters.register_dumper(str, Hook)


def wait_for_first_id(url: str, table: str, seconds: float = 30.0) -> None:
    """Wait until a row of ``table`` (a table of this run's own) has drawn its id."""
    with psycopg.connect(url, autocommit=True) as watcher:
        deadline = time.monotonic() + seconds
        while _last_id(watcher, table) == 0:
            assert time.monotonic() < deadline, f"replica one's first row drew no id in {seconds} s"
            time.sleep(0.01)


def _last_id(connection: psycopg.Connection[Any], table: str) -> int:
    """The last id the table's SERIAL handed out (0 before the first): seen at once by every session."""
    row = connection.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {table}_id_seq").fetchone()
    assert row is not None
    return int(row[0])


def interleaved_batches(url: str) -> list[str]:
    """Replica one's batch with replica two's added after its first row; the messages read back.
    A table of this run's own, so no other writer moves its sequence."""
    session, table = str(uuid.uuid4()), f"chat_history_{secrets.token_hex(4)}"
    with psycopg.connect(url) as one_conn, psycopg.connect(url) as two_conn:
        PostgresChatMessageHistory.create_tables(one_conn, table)
        try:
            one = PostgresChatMessageHistory(table, session, sync_connection=one_conn)
            two = PostgresChatMessageHistory(table, session, sync_connection=two_conn)

            def replica_two() -> None:
                wait_for_first_id(url, table)
                two.add_messages([HumanMessage(f"two #{i}") for i in range(2)])

            hook_before(one_conn, "one #1", replica_two)
            one.add_messages([HumanMessage(f"one #{i}") for i in range(2)])
            return [str(m.content) for m in one.messages]
        finally:
            one_conn.rollback()  # its read's open transaction would block the DROP
            PostgresChatMessageHistory.drop_table(one_conn, table)


def main(storetest_postgres_url: str | None = None) -> None:
    """Under pytest, on the test run's PostgreSQL; alone, on a throwaway server."""
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    got = interleaved_batches(storetest_postgres_url)
    assert got == ["one #0", "two #0", "two #1", "one #1"], f"the batches did not interleave: {got}"


if __name__ == "__main__":
    main()
