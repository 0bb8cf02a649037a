"""SQLAlchemyChatStore cannot create its table on MariaDB (or MySQL): its key, role and
status columns are String without a length, which the MySQL dialect refuses, 'VARCHAR
requires a length on dialect mysql'; every call raises (items_round_trip_exactly, and
every other clause)."""

import asyncio

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from sqlalchemy.exc import CompileError

from storetest import databases


async def _add(url: str) -> None:
    store = SQLAlchemyChatStore("chat", url.replace("mysql://", "mysql+aiomysql://", 1))
    try:
        await store.add_message("k", ChatMessage(role="user", content="hi"))
    finally:
        if store._async_engine is not None:
            await store._async_engine.dispose()


def main(storetest_mysql_url: str | None = None) -> None:
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            return main(url)
    try:
        asyncio.run(_add(storetest_mysql_url))
    except CompileError as exc:
        assert "VARCHAR requires a length on dialect mysql" in str(exc), exc
        return
    raise AssertionError("the message was stored")


if __name__ == "__main__":
    main()
