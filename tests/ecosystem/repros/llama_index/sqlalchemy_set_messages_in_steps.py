"""SQLAlchemyChatStore.set_messages commits delete_messages(key), then inserts the new
messages in a second transaction: a reader in between finds the key empty, neither the
old list nor the new (set_messages_is_atomic_to_readers, beyond the protocol's promise;
the same code on SQLite and PostgreSQL).

Deterministic: while the store serializes the first new message (after the delete
committed), a second store on its own event loop reads."""

import asyncio
import sys
import tempfile
import threading
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore

sys.path.insert(0, str(Path(__file__).parent))
from _llama_probe import probe


def _read(url: str, seen: list[list[str]]) -> None:
    async def read() -> None:
        reader = SQLAlchemyChatStore("chat", url)
        seen.append([m.content for m in await reader.get_messages("k")])
        await reader._async_engine.dispose()

    thread = threading.Thread(target=lambda: asyncio.run(read()))
    thread.start()
    thread.join()


async def _set(url: str, seen: list[list[str]]) -> None:
    store = SQLAlchemyChatStore("chat", url)
    await store.set_messages("k", [ChatMessage(role="user", content="old")])
    await store.set_messages("k", [probe("new", lambda: _read(url, seen))])
    await store._async_engine.dispose()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seen: list[list[str]] = []
        asyncio.run(_set(f"sqlite+aiosqlite:///{Path(tmp) / 'chat.db'}", seen))
        assert seen == [[]], f"the reader saw a whole list: {seen}"


if __name__ == "__main__":
    main()
