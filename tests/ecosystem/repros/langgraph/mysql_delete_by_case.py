"""langgraph-checkpoint-mysql 3.0.0's asyncmy saver (``AsyncMySaver``, on MariaDB):
``adelete_thread("T-Case")`` also deletes thread ``T-case``. Its ``thread_id`` columns
take the server's default collation, which ignores case, so two threads whose ids
differ only by case are one thread to the ``DELETE``. Deterministic."""

from __future__ import annotations

import asyncio
import secrets

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver

from storetest import databases


async def _run(url: str) -> None:
    async with AsyncMySaver.from_conn_string(url) as saver:
        await saver.setup()
        token = secrets.token_hex(4)
        upper, lower = f"{token}-Case", f"{token}-case"
        for thread in (upper, lower):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"owner": thread}
            checkpoint["channel_versions"] = {"owner": saver.get_next_version(None, None)}
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            await saver.aput(config, checkpoint, {}, dict(checkpoint["channel_versions"]))
        await saver.adelete_thread(upper)
        kept = await saver.aget_tuple({"configurable": {"thread_id": lower, "checkpoint_ns": ""}})
        assert kept is None, f"thread {lower!r} survived the delete of {upper!r}"


def main(storetest_mysql_url: str | None = None) -> None:
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            main(url)
        return
    asyncio.run(_run(storetest_mysql_url))


if __name__ == "__main__":
    main()
