"""RedisChatMessageHistory: a clear racing add_messages lands inside the batch
(clear_racing_add_lands_before_or_after): the history keeps the batch's tail, neither
empty nor the whole batch, because each message is its own LPUSH.

Deterministic: while the batch serializes its second message (after the first one's
LPUSH), a second handle clears the session."""

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
    adder = RedisChatMessageHistory("s", url=url, key_prefix=prefix)
    clearer = RedisChatMessageHistory("s", url=url, key_prefix=prefix)
    adder.add_messages([HumanMessage("old")])
    adder.add_messages([HumanMessage("new #0"), probe("new #1", clearer.clear)])
    got = [m.content for m in adder.messages]
    assert got == ["new #1"], f"the clear did not land inside the batch: {got}"


if __name__ == "__main__":
    main()
