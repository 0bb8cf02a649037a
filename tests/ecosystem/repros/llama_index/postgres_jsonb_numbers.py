"""PostgresChatStore with use_jsonb=True: messages go through jsonb, which keeps numbers
as numeric: the float 1e300 in additional_kwargs comes back as a 301-digit integer
(items_round_trip_exactly, set_messages_replaces_the_list)."""

import secrets

from llama_index.core.llms import ChatMessage
from llama_index.storage.chat_store.postgres import PostgresChatStore

from storetest import databases


def main(storetest_postgres_url: str | None = None) -> None:
    """Under pytest, on the test run's PostgreSQL; alone, on a throwaway server."""
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            return main(url)
    store = PostgresChatStore.from_uri(storetest_postgres_url, table_name=f"r{secrets.token_hex(4)}", use_jsonb=True)
    store.add_message("k", ChatMessage(role="user", content="x", additional_kwargs={"n": 1e300}))
    got = store.get_messages("k")[0].additional_kwargs["n"]
    assert isinstance(got, int) and got == 10**300, f"1e300 came back as {got!r}"


if __name__ == "__main__":
    main()
