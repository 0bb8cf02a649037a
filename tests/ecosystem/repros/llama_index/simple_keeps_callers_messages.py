"""SimpleChatStore keeps the caller's ChatMessage objects and hands out its own list:
changing a message after add_message, or appending to what get_messages returned,
changes the store (items_are_not_aliased; LlamaIndex does not document either way)."""

from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store import SimpleChatStore


def main() -> None:
    store = SimpleChatStore()
    message = ChatMessage(role="user", content="as added")
    store.add_message("k", message)
    message.blocks[0].text = "changed by the caller"
    store.get_messages("k").append(ChatMessage(role="user", content="appended by the caller"))
    got = [m.content for m in store.get_messages("k")]
    assert got == ["changed by the caller", "appended by the caller"], f"the store kept its own copies: {got}"


if __name__ == "__main__":
    main()
