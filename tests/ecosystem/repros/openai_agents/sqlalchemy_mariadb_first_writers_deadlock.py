"""SQLAlchemySession on MariaDB: the first writers of a conversation deadlock.

``add_items`` on a conversation with no session row yet looks for the row (no lock),
does not find it, and inserts it. A first writer's insert holds the new row; two more
first writers' inserts of the same key wait on it, each taking a shared lock on the
duplicate key. When the first commits, both fail with the duplicate, fall back to
``SELECT ... FOR UPDATE`` on the row, and each waits for the other's shared lock:
InnoDB kills one, ``(1213, 'Deadlock found when trying to get lock')``, and its items
are not added.

Here the first writer is a second connection that inserts the session row and holds
its transaction open until both sessions' ``add_items`` are seen waiting on it
(``information_schema.INNODB_TRX``): the interleaving is forced, so this is
deterministic. The tables are the SDK's, made by hand (its ``create_tables=True``
cannot make them on MariaDB).

    python tests/ecosystem/repros/openai_agents/sqlalchemy_mariadb_first_writers_deadlock.py
"""

from __future__ import annotations

import asyncio
import secrets
import time

from agents.extensions.memory import SQLAlchemySession
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from storetest import databases

# SQLAlchemySession's tables, as tests/ecosystem/openai_agents.py makes them ({t}: a suffix of
# this run's, for a database shared with other tests).
SCHEMA = (
    "CREATE TABLE agent_sessions{t} ("
    "session_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL PRIMARY KEY, "
    "created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
    "updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    "CREATE TABLE agent_messages{t} (id INTEGER NOT NULL AUTO_INCREMENT PRIMARY KEY, "
    "session_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, "
    "message_data LONGTEXT CHARACTER SET utf8mb4 NOT NULL, "
    "created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
    "INDEX idx_agent_messages_session_time (session_id, created_at), "
    "FOREIGN KEY (session_id) REFERENCES agent_sessions{t} (session_id) ON DELETE CASCADE)",
)


def _waiting(monitor: object) -> int:
    with monitor.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
        return int(cur.fetchone()[0])


async def _race(url: str) -> list[BaseException | None]:
    t = "_" + secrets.token_hex(4)
    tables = {"sessions_table": f"agent_sessions{t}", "messages_table": f"agent_messages{t}"}
    engine = create_async_engine("mysql+aiomysql://" + url.split("://", 1)[1] + "?charset=utf8mb4")
    try:
        async with engine.begin() as conn:
            for statement in SCHEMA:
                await conn.execute(text(statement.format(t=t)))
        first = databases.mysql_connection(url)
        monitor = databases.mysql_connection(url, autocommit=True)
        try:
            with first.cursor() as cur:  # the conversation's first writer, mid-transaction
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO agent_sessions{t} (session_id) VALUES ('conversation')")
            writers = [asyncio.ensure_future(SQLAlchemySession("conversation", engine=engine, **tables).add_items(
                [{"role": "user", "content": f"from writer {w}"}])) for w in range(2)]
            deadline = time.monotonic() + 30
            while _waiting(monitor) < 2:
                assert time.monotonic() < deadline, "the two add_items() never waited on the first writer's row"
                assert not any(w.done() for w in writers), (
                    "an add_items() finished while the first writer held the session row: it did not wait on it")
                # INNODB_TRX is a cache refreshed only when read 0.1 s after its last read:
                # polled faster, it never shows the waiters (it never did on a quiet machine).
                await asyncio.sleep(0.25)
            first.commit()
            return [r if isinstance(r, BaseException) else None
                    for r in await asyncio.gather(*writers, return_exceptions=True)]
        finally:
            first.close()
            monitor.close()
    finally:
        await engine.dispose()


def main(storetest_mysql_url: str | None = None) -> None:
    """Under pytest, on the test run's MariaDB (a fresh database); alone, on a throwaway server."""
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            return main(url)
    results = asyncio.run(_race(storetest_mysql_url))
    deadlocks = [r for r in results if isinstance(r, OperationalError) and "1213" in str(r)]
    assert deadlocks, f"neither waiting add_items() deadlocked: {results}"
    print(f"{len(deadlocks)} of 2 add_items() raised: {deadlocks[0].orig}")


if __name__ == "__main__":
    main()
