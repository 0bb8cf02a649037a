"""PostgresChatStore with use_jsonb=True refuses a message holding a NUL character
(jsonb: 'unsupported Unicode escape sequence'), which JSON text allows
(items_keep_nul_characters)."""

import secrets

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.postgres import PostgresChatStore
from sqlalchemy.exc import DataError

from storetest import databases


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    store = PostgresChatStore.from_uri(storetest_postgres_url, table_name=f"r{secrets.token_hex(4)}", use_jsonb=True)
    try:
        store.add_message("k", ChatMessage(role="user", content="a\x00b"))
    except DataError as exc:
        assert "unsupported Unicode escape sequence" in str(exc), exc
        return
    raise AssertionError("a message with a NUL was stored")


if __name__ == "__main__":
    main()
