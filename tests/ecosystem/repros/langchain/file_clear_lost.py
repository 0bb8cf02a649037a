"""FileChatMessageHistory: a clear racing add_messages is undone (clear_racing_add_lands_before_or_after):
the add read the file before the clear and writes the old messages back with the new.

Deterministic: while the add serializes its message (after reading the file, before
writing it), a second handle clears the history."""

import sys
import tempfile
from pathlib import Path

from langchain_community.chat_message_histories import FileChatMessageHistory
from langchain_core.messages import HumanMessage

sys.path.insert(0, str(Path(__file__).parent))
from _probe import probe


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "chat.json")
        adder, clearer = FileChatMessageHistory(path), FileChatMessageHistory(path)
        adder.add_messages([HumanMessage("old")])
        adder.add_messages([probe("new", clearer.clear)])
        got = [m.content for m in clearer.messages]
        assert got == ["old", "new"], f"the clear was not undone: {got}"


if __name__ == "__main__":
    main()
