"""SimpleChatStore.delete_last_message on a key whose messages were all deleted raises
IndexError ('pop from empty list') instead of returning None: the key stays, holding
an empty list (pop_item_takes_the_newest; racing pops raise it too)."""

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store import SimpleChatStore


def main() -> None:
    store = SimpleChatStore()
    store.add_message("k", ChatMessage(role="user", content="only"))
    assert store.delete_last_message("k").content == "only"
    try:
        got = store.delete_last_message("k")
    except IndexError as exc:
        assert "pop from empty list" in str(exc), exc
        return
    raise AssertionError(f"delete_last_message on an emptied key returned {got!r}")


if __name__ == "__main__":
    main()
