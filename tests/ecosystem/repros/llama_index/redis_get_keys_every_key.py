"""RedisChatStore.get_keys is KEYS *: it lists every key of the Redis database, those
another application wrote included, not the keys holding this store's messages
(get_keys_lists_the_keys_written)."""

import secrets

from llama_index.storage.chat_store.redis import RedisChatStore
from redis import Redis

from storetest import databases


def main(storetest_redis_url: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis") as server:
            return main(server.url)
    theirs = f"another-app:{secrets.token_hex(4)}"
    client = Redis.from_url(storetest_redis_url)
    client.set(theirs, "not a chat")
    store = RedisChatStore(redis_url=storetest_redis_url)
    listed = store.get_keys()
    client.delete(theirs)
    client.close()
    store._redis_client.close()
    assert theirs in listed, f"get_keys did not list another application's key: {listed[:5]}"


if __name__ == "__main__":
    main()
