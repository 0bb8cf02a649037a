"""SQLChatMessageHistory on MariaDB creates its table when constructed, by SQLAlchemy's
check-then-``CREATE TABLE``: another history constructed on a fresh database between the
check and the ``CREATE`` makes the constructor raise "Table 'message_store' already
exists" (1050) (first_calls_on_a_fresh_backend_succeed: constructors racing on a fresh
database).

Deterministic, through the application's own engines (``connection=engine``): a
``before_cursor_execute`` listener on our engine, just before its ``CREATE TABLE`` runs,
lets another history on its own engine create the table first. A table name of its own
(``table_name=``, a constructor parameter) makes the database fresh for it."""

import secrets
from typing import Any

from langchain_community.chat_message_histories import SQLChatMessageHistory
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import OperationalError

from storetest import databases


def main(storetest_mysql_url: str | None = None) -> None:
    """Under pytest, on the test run's MariaDB; alone, on a throwaway server."""
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            return main(url)
    url = storetest_mysql_url.replace("mysql://", "mysql+pymysql://", 1) + "?charset=utf8mb4"
    table = f"message_store_{secrets.token_hex(4)}"
    ours, theirs = create_engine(url), create_engine(url)
    done: list[bool] = []

    @event.listens_for(ours, "before_cursor_execute")
    def the_other_history_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE") and not done:
            done.append(True)
            SQLChatMessageHistory("other", connection=theirs, table_name=table)

    try:
        SQLChatMessageHistory("s", connection=ours, table_name=table)
    except OperationalError as exc:
        assert "already exists" in str(exc), exc
        return
    finally:
        with theirs.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS `{table}`"))
        ours.dispose()
        theirs.dispose()
    raise AssertionError("the constructor did not race the other history's CREATE TABLE")


if __name__ == "__main__":
    main()
