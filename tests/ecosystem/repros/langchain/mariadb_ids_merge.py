"""SQLChatMessageHistory on MariaDB: its ``session_id`` column is ``TEXT`` under the
server's default collation, case-insensitive and PAD SPACE, so ``user-a``, ``user-A``
and ``user-a `` are one history (item_sessions_are_isolated)."""

import secrets

from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.messages import HumanMessage
from sqlalchemy import create_engine

from storetest import databases


def main(storetest_mysql_url: str | None = None) -> None:
    """Under pytest, on the test run's MariaDB; alone, on a throwaway server."""
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            return main(url)
    token = secrets.token_hex(4)
    engine = create_engine(storetest_mysql_url.replace("mysql://", "mysql+pymysql://", 1) + "?charset=utf8mb4")
    try:
        SQLChatMessageHistory(f"{token}-a", connection=engine).add_messages([HumanMessage("for -a only")])
        for other in (f"{token}-A", f"{token}-a "):
            got = [m.content for m in SQLChatMessageHistory(other, connection=engine).messages]
            assert got == ["for -a only"], f"{other!r} holds {got}"
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()
