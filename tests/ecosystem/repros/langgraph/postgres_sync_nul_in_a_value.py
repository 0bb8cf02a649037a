"""PostgresSaver (the sync class) refuses a checkpoint whose string channel value holds
a NUL, as AsyncPostgresSaver does (primitives kept inline in the ``checkpoint`` jsonb
column: "unsupported Unicode escape sequence", LangGraph issue 1878). Deterministic."""

from __future__ import annotations

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

from storetest import databases


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    with PostgresSaver.from_conn_string(storetest_postgres_url) as saver:
        saver.setup()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"text": "before\x00after"}
        checkpoint["channel_versions"] = {"text": saver.get_next_version(None, None)}
        config = {"configurable": {"thread_id": "nul", "checkpoint_ns": ""}}
        try:
            saver.put(config, checkpoint, {}, dict(checkpoint["channel_versions"]))
        except Exception as exc:
            assert type(exc).__name__ == "UntranslatableCharacter", exc
            assert "unsupported Unicode escape sequence" in str(exc), exc
            return
        raise AssertionError("a string channel value with a NUL was stored")


if __name__ == "__main__":
    main()
