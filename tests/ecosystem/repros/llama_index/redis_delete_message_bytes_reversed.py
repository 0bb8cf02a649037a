"""RedisChatStore.delete_message(key, idx) reads the list, drops item idx, and writes the
rest back with LPUSH, which pushes each to the head: the messages left come back in
reverse order; and it returns the removed message as raw bytes
(delete_message_removes_that_one)."""

import secrets

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.redis import RedisChatStore

from storetest import databases


def main(storetest_redis_url: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis") as server:
            return main(server.url)
    store = RedisChatStore(redis_url=storetest_redis_url)
    key = f"repro-{secrets.token_hex(4)}"
    store.set_messages(key, [ChatMessage(role="user", content=f"m{i}") for i in range(4)])
    got = store.delete_message(key, 0)
    left = [m.content for m in store.get_messages(key)]
    store._redis_client.delete(key)
    store._redis_client.close()
    assert isinstance(got, bytes), f"delete_message returned {got!r}"
    assert left == ["m3", "m2", "m1"], f"the messages left kept their order: {left}"


if __name__ == "__main__":
    main()
