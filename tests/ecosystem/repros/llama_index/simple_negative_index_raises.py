"""SimpleChatStore.delete_message(key, idx) with idx below -len raises IndexError ('pop
index out of range'), where an index past the end returns None: it checks idx >= len
only, and list.pop counts a negative index from the end (delete_message_with_a_negative_index)."""

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store import SimpleChatStore


def main() -> None:
    store = SimpleChatStore()
    store.set_messages("k", [ChatMessage(role="user", content=f"m{i}") for i in range(5)])
    assert store.delete_message("k", 5) is None
    try:
        got = store.delete_message("k", -6)
    except IndexError as exc:
        assert "pop index out of range" in str(exc), exc
        return
    raise AssertionError(f"delete_message(key, -6) returned {got!r}")


if __name__ == "__main__":
    main()
