"""SQLChatMessageHistory on MariaDB: its ``session_id`` column is ``TEXT`` under the
server's default collation, case-insensitive and PAD SPACE, so ``user-a``, ``user-A``
and ``user-a `` are one history (item_sessions_are_isolated)."""

from langchain_community.chat_message_histories import SQLChatMessageHistory
from langchain_core.messages import HumanMessage
from sqlalchemy import create_engine

from storetest import databases


def main() -> None:
    with databases.throwaway("mysql") as url:
        engine = create_engine(url.replace("mysql://", "mysql+pymysql://", 1) + "?charset=utf8mb4")
        try:
            SQLChatMessageHistory("user-a", connection=engine).add_messages([HumanMessage("for user-a only")])
            for other in ("user-A", "user-a "):
                got = [m.content for m in SQLChatMessageHistory(other, connection=engine).messages]
                assert got == ["for user-a only"], f"{other!r} holds {got}"
        finally:
            engine.dispose()


if __name__ == "__main__":
    main()
