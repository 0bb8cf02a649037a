"""langgraph-checkpoint-mysql 3.0.0's asyncmy saver (``AsyncMySaver``, on MariaDB) refuses a
checkpoint with a ``bytearray`` channel value: ``TypeError: Argument 'value' has incorrect
type (expected bytes, got bytearray)`` (the serde gives the bytearray itself as the
blob, which asyncmy will not send). InMemorySaver and AsyncPostgresSaver keep it.
Deterministic."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver

from storetest import databases

sys.path.insert(0, str(Path(__file__).parent))
from _langgraph_probe import bytearray_back


async def _run(url: str) -> None:
    async with AsyncMySaver.from_conn_string(url) as saver:
        await saver.setup()
        try:
            got = await bytearray_back(saver, "raw")
        except TypeError as exc:
            assert "expected bytes, got bytearray" in str(exc), exc
            return
        raise AssertionError(f"a bytearray was stored and came back as {type(got).__name__}")


def main(storetest_mysql_url: str | None = None) -> None:
    if storetest_mysql_url is None:
        with databases.throwaway("mysql") as url:
            main(url)
        return
    asyncio.run(_run(storetest_mysql_url))


if __name__ == "__main__":
    main()
