"""InMemoryChatMessageHistory keeps the caller's message objects and hands out its own
list: a caller changing a message it added, or the list ``messages`` returned, changes
the history (items_are_not_aliased; LangChain does not document either way)."""

from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.messages import HumanMessage


def main() -> None:
    history = InMemoryChatMessageHistory()
    sent = HumanMessage("what the caller said")
    history.add_messages([sent])
    sent.content = "changed by the caller after add_messages"
    history.messages.append(HumanMessage("appended by the caller to what messages returned"))
    got = [m.content for m in history.messages]
    assert got == ["changed by the caller after add_messages", "appended by the caller to what messages returned"], got


if __name__ == "__main__":
    main()
