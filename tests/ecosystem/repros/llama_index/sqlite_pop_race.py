"""SQLiteChatStore.delete_last_message reads the last row, then deletes it by id, with no
lock between: a second caller popping in between gets the same message, and the first
caller hands it out again (pop_item_hands_each_item_out_once).

Deterministic: between the first caller's SELECT and its DELETE, a second store pops."""

import sys
import tempfile
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.sqlite import SQLiteChatStore
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import sessionmaker

sys.path.insert(0, str(Path(__file__).parent))
from _llama_probe import once_before, text


def _store(path: Path) -> tuple[SQLiteChatStore, object]:
    engine = create_engine(f"sqlite:///{path}")
    return SQLiteChatStore(sessionmaker(engine), async_sessionmaker(create_async_engine(
        f"sqlite+aiosqlite:///{path}")), "chatstore"), engine


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.db"
        (one, engine), (two, _) = _store(path), _store(path)
        one.set_messages("k", [ChatMessage(role="user", content=f"m{i}") for i in range(3)])
        other: list[object] = []
        once_before(engine, "DELETE", lambda: other.append(two.delete_last_message("k")))
        first = one.delete_last_message("k")
        popped = [text(first), text(other[0])]
        assert popped == ["m2", "m2"], f"the two pops took different messages: {popped}"


if __name__ == "__main__":
    main()
