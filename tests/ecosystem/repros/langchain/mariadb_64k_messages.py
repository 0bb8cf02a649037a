"""SQLChatMessageHistory on MariaDB: its ``message`` column is ``TEXT`` (65,535 bytes), so
a message whose JSON is longer is refused, "Data too long for column 'message'"
(large_items_round_trip: a 1 MiB message; 70,000 characters is enough)."""

import secrets

from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.messages import HumanMessage
from sqlalchemy import create_engine
from sqlalchemy.exc import DataError

from storetest import databases


def main(storetest_mysql_url: str | None = None) -> None:
    """Under pytest, on the test run's MariaDB; alone, on a throwaway server."""
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            return main(url)
    engine = create_engine(storetest_mysql_url.replace("mysql://", "mysql+pymysql://", 1) + "?charset=utf8mb4")
    try:
        history = SQLChatMessageHistory(secrets.token_hex(4), connection=engine)
        try:
            history.add_messages([HumanMessage("x" * 70_000)])
        except DataError as exc:
            assert "Data too long for column 'message'" in str(exc), exc
            return
        raise AssertionError("a 70,000-character message was stored")
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()
