"""FileChatMessageHistory rewrites its file in place (``Path.write_text`` truncates, then
writes), and its constructor creates an empty file before writing ``[]``: a reader (or
another add, which reads first) between the two finds an empty file and raises
``JSONDecodeError`` (first_calls_on_a_fresh_backend_succeed, adds_from_processes_land_whole,
and the race clauses whose calls raised it).

A provoked race: one thread adds messages while another reads the same file, for up
to ``ROUNDS`` rounds of ``ADDS`` adds; ``main()`` returns at the first read that raises."""

import json
import sys
import tempfile
import threading
from pathlib import Path

from langchain_community.chat_message_histories import FileChatMessageHistory
from langchain_core.messages import HumanMessage

ROUNDS = 200
ADDS = 50


def round_tears(path: str) -> bool:
    """One round: a writer adding ``ADDS`` messages, a reader reading meanwhile."""
    writer, reader = FileChatMessageHistory(path), FileChatMessageHistory(path)
    done, torn = threading.Event(), threading.Event()

    def read() -> None:
        while not done.is_set() and not torn.is_set():
            try:
                reader.messages  # noqa: B018
            except json.JSONDecodeError:
                torn.set()

    thread = threading.Thread(target=read)
    thread.start()
    for i in range(ADDS):
        writer.add_messages([HumanMessage(f"m{i}" * 50)])
    done.set()
    thread.join()
    return torn.is_set()


def rounds_until_torn(rounds: int = ROUNDS) -> int | None:
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(1, rounds + 1):
            if round_tears(str(Path(tmp) / f"chat{n}.json")):
                return n
    return None


def main() -> None:
    found = rounds_until_torn()
    assert found is not None, f"no read saw a torn file in {ROUNDS} rounds"


if __name__ == "__main__":
    runs = int(sys.argv[1]) if sys.argv[1:] else 1
    sys.stdout.write(f"{[rounds_until_torn() for _ in range(runs)]}\n")
