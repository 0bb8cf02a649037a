"""PostgresChatStore.delete_last_message reads the array, then sets it to
value[1:length - 1] in a second statement, with no lock: a pop by another caller in
between is undone twice over, one message handed to both callers and another lost
(pop_item_hands_each_item_out_once; JSON and JSONB alike).

Deterministic: between the first caller's SELECT and its UPDATE, a second store pops."""

import secrets
import sys
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.postgres import PostgresChatStore
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import sessionmaker

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _llama_probe import once_before, text


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    table = f"r{secrets.token_hex(4)}"
    engines = [create_engine(storetest_postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))
               for _ in range(2)]
    aio = create_async_engine(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1))
    one, two = (PostgresChatStore(sessionmaker(e), sessionmaker(aio, class_=AsyncSession), table) for e in engines)
    try:
        one.set_messages("k", [ChatMessage(role="user", content=f"m{i}") for i in range(3)])
        other: list[object] = []
        once_before(engines[0], "UPDATE", lambda: other.append(two.delete_last_message("k")))
        first = one.delete_last_message("k")
        left = [m.content for m in one.get_messages("k")]
        assert [text(first), text(other[0]), left] == ["m2", "m2", ["m0"]], (text(first), text(other[0]), left)
    finally:
        for e in engines:
            e.dispose()


if __name__ == "__main__":
    main()
