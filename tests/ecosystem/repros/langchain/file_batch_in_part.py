"""FileChatMessageHistory.add_messages writes one message at a time (each
``add_message`` rewrites the file): a reader between two of them sees part of the batch
(a_batch_is_atomic_to_readers, beyond LangChain's documented promise).

Deterministic: the batch's second message, when serialized (after the first one's
write), has a second handle on the file read it."""

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
        writer, reader = FileChatMessageHistory(path), FileChatMessageHistory(path)
        seen: list[list[str]] = []
        writer.add_messages([HumanMessage("batch #0"),
                             probe("batch #1", lambda: seen.append([str(m.content) for m in reader.messages]))])
        assert seen == [["batch #0"]], f"a reader during add_messages saw {seen}, not one message of two"


if __name__ == "__main__":
    main()
