"""RedisChatMessageHistory.add_messages writes one message at a time (one LPUSH per
message, BaseChatMessageHistory's default add_messages): a reader between two of them
sees part of the batch (a_batch_is_atomic_to_readers, beyond LangChain's documented
promise: add_messages is documented as a bulk add for efficiency).

Deterministic: the second message of the batch, when the history serializes it (after the
first one's LPUSH), has a second handle read the history; that read holds one message."""

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
    writer = RedisChatMessageHistory("s", url=url, key_prefix=prefix)
    reader = RedisChatMessageHistory("s", url=url, key_prefix=prefix)
    seen: list[list[str]] = []
    writer.add_messages([HumanMessage("batch #0"),
                         probe("batch #1", lambda: seen.append([str(m.content) for m in reader.messages]))])
    assert seen == [["batch #0"]], f"a reader during add_messages saw {seen}, not one message of two"
    assert [m.content for m in reader.messages] == ["batch #0", "batch #1"]


if __name__ == "__main__":
    main()
