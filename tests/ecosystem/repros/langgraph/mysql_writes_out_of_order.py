"""langgraph-checkpoint-mysql 3.0.0's asyncmy saver (``AsyncMySaver``, on MariaDB) gives a
checkpoint's pending writes in another order than (task_path, task_id, idx), the order
InMemorySaver and the Postgres saver give (LangGraph applies pending writes in that
order on resume). Deterministic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import writes_order


async def _run(url: str) -> None:
    async with AsyncMySaver.from_conn_string(url) as saver:
        await saver.setup()
        order = await writes_order(saver, "writes")
        assert order == ["a", "b"], f"pending writes came back as {order}"


def main(storetest_mysql_url: str | None = None) -> None:
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            main(url)
        return
    asyncio.run(_run(storetest_mysql_url))


if __name__ == "__main__":
    main()
