"""langchain-postgres PostgresChatMessageHistory: two replicas' concurrent add_messages
batches on one session interleave (concurrent_batches_never_interleave, beyond
LangChain's documented promise). Each batch is one transaction, but rows are read back
``ORDER BY id``, a ``SERIAL`` that concurrent inserts draw from in turn.

A provoked race: two threads, each on its own connection (two replicas), add a 200-message
batch at the same moment, up to ``ROUNDS`` times; ``main()`` returns at the first round
that interleaves. The measured miss rate is in tests/ecosystem/langchain.py."""

import itertools
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from langchain_core.messages import HumanMessage
from langchain_postgres import PostgresChatMessageHistory

from storetest import databases

ROUNDS = 200
SIZE = 100


def interleaved(one: Any, two: Any, session: str) -> bool:
    """One round: both batches at once; whether they came back interleaved."""
    barrier = threading.Barrier(2)

    def add(history: Any, name: str) -> Callable[[], None]:
        batch = [HumanMessage(f"{name} #{i}") for i in range(SIZE)]
        return lambda: (barrier.wait(), history.add_messages(batch))  # type: ignore[func-returns-value]

    threads = [threading.Thread(target=add(h(session), n)) for h, n in ((one, "one"), (two, "two"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    owners = [str(m.content).split(" ")[0] for m in one(session).messages]
    return sum(a != b for a, b in itertools.pairwise(owners)) > 1


def rounds_until_interleaved(url: str, rounds: int = ROUNDS) -> int | None:
    """The first round (from 1) whose batches interleaved, ``None`` if none did."""
    connections = [psycopg.connect(url) for _ in range(2)]
    try:
        PostgresChatMessageHistory.create_tables(connections[0], "chat_history")
        one, two = (lambda s, c=c: PostgresChatMessageHistory("chat_history", s, sync_connection=c)
                    for c in connections)
        for n in range(1, rounds + 1):
            if interleaved(one, two, str(uuid.uuid4())):
                return n
        return None
    finally:
        for c in connections:
            c.close()


def main(storetest_postgres_url: str | None = None) -> None:
    """Under pytest, on the test run's PostgreSQL; alone, on a throwaway server."""
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    found = rounds_until_interleaved(storetest_postgres_url)
    assert found is not None, f"no interleaving in {ROUNDS} rounds"


if __name__ == "__main__":
    with databases.throwaway("postgres") as url:
        # Measure: how many rounds each interleaving took (python this.py N).
        runs = int(sys.argv[1]) if sys.argv[1:] else 1
        sys.stdout.write(f"{[rounds_until_interleaved(url) for _ in range(runs)]}\n")
