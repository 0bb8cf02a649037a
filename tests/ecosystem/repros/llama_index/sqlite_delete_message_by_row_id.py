"""SQLiteChatStore.delete_message(key, idx) deletes the row whose id is idx, not the
message at position idx: on a key of five messages, delete_message(key, 0) returns None
and removes nothing (ids start at 1), and on a second key every index misses
(delete_message_removes_that_one)."""

import tempfile
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.sqlite import SQLiteChatStore


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteChatStore.from_uri(f"sqlite:///{Path(tmp) / 'chat.db'}")
        for key in ("a", "b"):
            store.set_messages(key, [ChatMessage(role="user", content=f"{key}{i}") for i in range(5)])
        got = store.delete_message("b", 0)
        left = [m.content for m in store.get_messages("b")]
        assert got is None and left == [f"b{i}" for i in range(5)], f"message 0 of b was deleted: {got!r}, {left}"


if __name__ == "__main__":
    main()
