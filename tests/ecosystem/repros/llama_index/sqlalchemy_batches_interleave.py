"""SQLAlchemyChatStore (llama-index-core) on PostgreSQL: batches that writers in two
processes add to one key at once interleave when read back. ``add_messages`` gives each
row ``time.time_ns() + i``, the clock read anew for every message while the INSERT is
built, and ``get_messages`` orders by that timestamp: a batch's rows spread over
microseconds, and another process's batch built in that time sorts between them.

A bounded loop: two processes, each adding 200 batches of six messages; it fails when no
batch came back split (measured: every one of 20 runs found split batches)."""

from __future__ import annotations

import asyncio
import os
import secrets

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
from sqlalchemy.ext.asyncio import create_async_engine

from storetest import databases


def _store(url: str) -> SQLAlchemyChatStore:
    return SQLAlchemyChatStore("chat", async_engine=create_async_engine(
        url.replace("postgresql://", "postgresql+asyncpg://", 1)))


async def _write(url: str, key: str, name: str) -> None:
    store = _store(url)
    for b in range(200):
        await store.add_messages(key, [ChatMessage(role="user", content=f"{name}-b{b} #{i}") for i in range(6)])


def _split_batches(texts: list[str]) -> list[str]:
    """The batches whose six messages are not adjacent, in order."""
    split = []
    for start in range(0, len(texts), 6):
        batch = texts[start:start + 6]
        if batch != [f"{batch[0].split(' #')[0]} #{i}" for i in range(6)]:
            split.append(batch[0])
    return split


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    url, key = storetest_postgres_url, f"k-{secrets.token_hex(4)}"
    asyncio.run(_store(url).add_messages(f"{key}-setup", [ChatMessage(role="user", content="creates the table")]))
    children = []
    for name in ("one", "two"):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                asyncio.run(_write(url, key, name))
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    assert all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in children), "a writer failed"
    texts = [str(m.content) for m in asyncio.run(_store(url).get_messages(key))]
    assert len(texts) == 2 * 200 * 6, len(texts)
    split = _split_batches(texts)
    assert split, "no batch came back split in 400 batches from two processes"


if __name__ == "__main__":
    main()
