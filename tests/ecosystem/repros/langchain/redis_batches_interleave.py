"""RedisChatMessageHistory: two replicas' add_messages batches on one session interleave
(concurrent_batches_never_interleave, beyond LangChain's documented promise): each
message is its own LPUSH, so a batch another replica adds between two of them lands
inside this one.

Deterministic: while replica one's batch serializes its second message (after the
first message's LPUSH), replica two adds its whole batch."""

import secrets
import sys
from pathlib import Path

from langchain_community.chat_message_histories import RedisChatMessageHistory
from langchain_core.messages import HumanMessage

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _probe import probe


def main(storetest_redis_url: str | None = None, storetest_redis_prefix: str | None = None) -> None:
    """Under pytest, on the test run's Redis under its key prefix; alone, on a throwaway server."""
    if storetest_redis_url is None or storetest_redis_prefix is None:
        with databases.throwaway("redis") as (url, prefix):
            return main(url, prefix)
    url, prefix = storetest_redis_url, f"{storetest_redis_prefix}{secrets.token_hex(4)}:"
    one = RedisChatMessageHistory("s", url=url, key_prefix=prefix)
    two = RedisChatMessageHistory("s", url=url, key_prefix=prefix)
    one.add_messages([HumanMessage("one #0"), probe(
        "one #1", lambda: two.add_messages([HumanMessage("two #0"), HumanMessage("two #1")]))])
    got = [m.content for m in one.messages]
    assert got == ["one #0", "two #0", "two #1", "one #1"], f"the batches did not interleave: {got}"


if __name__ == "__main__":
    main()
