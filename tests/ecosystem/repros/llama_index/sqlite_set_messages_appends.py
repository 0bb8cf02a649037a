"""SQLiteChatStore.set_messages inserts the new messages without deleting the old ones:
the key holds the old list, then the new one (set_messages_replaces_the_list; a reader
racing it sees that too, neither the old list nor the new)."""

import tempfile
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.sqlite import SQLiteChatStore


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteChatStore.from_uri(f"sqlite:///{Path(tmp) / 'chat.db'}")
        store.set_messages("k", [ChatMessage(role="user", content="old")])
        store.set_messages("k", [ChatMessage(role="user", content="new")])
        got = [m.content for m in store.get_messages("k")]
        assert got == ["old", "new"], f"set_messages replaced the list: {got}"


if __name__ == "__main__":
    main()
