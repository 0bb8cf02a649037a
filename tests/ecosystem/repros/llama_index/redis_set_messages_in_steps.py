"""RedisChatStore.set_messages is DEL, then one RPUSH per message: a reader in between
sees neither the old list nor the new one (set_messages_is_atomic_to_readers, beyond
the protocol's promise).

Deterministic: while the store serializes the second message, a second store reads."""

import secrets
import sys
from pathlib import Path

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.redis import RedisChatStore

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _llama_probe import probe


def main(storetest_redis_url: str | None = None) -> None:
    if storetest_redis_url is None:
        with databases.throwaway("redis") as server:
            return main(server.url)
    one, two = RedisChatStore(redis_url=storetest_redis_url), RedisChatStore(redis_url=storetest_redis_url)
    key = f"repro-{secrets.token_hex(4)}"
    one.set_messages(key, [ChatMessage(role="user", content="old")])
    seen: list[list[str]] = []
    one.set_messages(key, [ChatMessage(role="user", content="new0"), probe(
        "new1", lambda: seen.append([m.content for m in two.get_messages(key)]))])
    one._redis_client.delete(key)
    for store in (one, two):
        store._redis_client.close()
    assert seen == [["new0"]], f"the reader saw a whole list: {seen}"


if __name__ == "__main__":
    main()
