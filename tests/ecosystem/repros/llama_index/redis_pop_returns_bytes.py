"""RedisChatStore.delete_last_message returns what RPOP gave, the message's raw JSON as
bytes, not a ChatMessage (pop_item_takes_the_newest, and every clause that pops:
item_replicas_see_each_others_writes, pop_item_hands_each_item_out_once,
item_history_matches_model)."""

import secrets

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.redis import RedisChatStore

from storetest import databases


def main(storetest_redis_url: str | None = None) -> None:
    """Under pytest, on the test run's Redis; alone, on a throwaway server."""
    if storetest_redis_url is None:
        with databases.throwaway("redis") as server:
            return main(server.url)
    store = RedisChatStore(redis_url=storetest_redis_url)
    key = f"repro-{secrets.token_hex(4)}"
    store.add_message(key, ChatMessage(role="user", content="hi"))
    got = store.delete_last_message(key)
    store._redis_client.delete(key)
    store._redis_client.close()
    assert isinstance(got, bytes) and b'"text":"hi"' in got, f"delete_last_message returned {got!r}"


if __name__ == "__main__":
    main()
