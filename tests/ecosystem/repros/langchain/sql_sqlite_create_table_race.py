"""SQLChatMessageHistory creates its table when constructed, by SQLAlchemy's
check-then-``CREATE TABLE``: a second process creating it between the check and the
``CREATE`` makes the constructor raise "table message_store already exists"
(adds_from_processes_land_whole: writers in three processes opening one SQLite file).

Deterministic: the caller's own engine has a listener that, just before its
``CREATE TABLE`` runs, lets another history (another process's, on its own engine)
create the table first."""

import tempfile
from pathlib import Path
from typing import Any

from langchain_community.chat_message_histories import SQLChatMessageHistory
from sqlalchemy import create_engine, event
from sqlalchemy.exc import OperationalError


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'chat.db'}"
        ours, theirs = create_engine(url), create_engine(url)
        done: list[bool] = []

        @event.listens_for(ours, "before_cursor_execute")
        def the_other_process_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("CREATE TABLE") and not done:
                done.append(True)
                SQLChatMessageHistory("other", connection=theirs)

        try:
            SQLChatMessageHistory("s", connection=ours)
        except OperationalError as exc:
            assert "already exists" in str(exc), exc
            return
        finally:
            ours.dispose()
            theirs.dispose()
        raise AssertionError("the constructor did not race the other process's CREATE TABLE")


if __name__ == "__main__":
    main()
