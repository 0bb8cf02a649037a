"""FileChatMessageHistory.add_message reads the whole file, appends, and writes it back,
with no lock: what another handle (another replica, another process) adds in between is
overwritten and lost (concurrent_adds_lose_nothing, concurrent_batches_never_interleave).

Deterministic: while one handle's add serializes its message (after reading the file,
before writing it), a second handle adds its batch."""

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
        one, two = FileChatMessageHistory(path), FileChatMessageHistory(path)
        one.add_messages([probe("one #0", lambda: two.add_messages([HumanMessage("two #0")]))])
        got = [m.content for m in two.messages]
        assert got == ["one #0"], f"the other handle's message was not lost: {got}"


if __name__ == "__main__":
    main()
