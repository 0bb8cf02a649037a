"""AsyncPostgresSaver refuses a checkpoint whose string channel value holds a NUL
(primitives are kept inline in the ``checkpoint`` jsonb column: "unsupported Unicode
escape sequence", LangGraph issue 1878); InMemorySaver and AsyncSqliteSaver keep it.
Deterministic."""

from __future__ import annotations

import asyncio

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from storetest import databases


async def _run(url: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"text": "before\x00after"}
        checkpoint["channel_versions"] = {"text": saver.get_next_version(None, None)}
        config = {"configurable": {"thread_id": "nul", "checkpoint_ns": ""}}
        try:
            await saver.aput(config, checkpoint, {}, dict(checkpoint["channel_versions"]))
        except Exception as exc:
            assert type(exc).__name__ == "UntranslatableCharacter", exc
            assert "unsupported Unicode escape sequence" in str(exc), exc
            return
        raise AssertionError("a string channel value with a NUL was stored")


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    asyncio.run(_run(storetest_postgres_url))


if __name__ == "__main__":
    main()
