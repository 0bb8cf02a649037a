"""AsyncSqliteSaver.setup() run by four savers at once on a fresh file fails now and
then with ``database is locked``, at once, not after the connection's 5 s busy timeout:
setup() runs ``PRAGMA journal_mode=WAL`` on every open, and SQLite answers a switch to
WAL that another connection is making at the same moment with SQLITE_BUSY without
calling the busy handler (plain ``sqlite3`` does the same: four connections running the
PRAGMA on a fresh file). As four workers starting together on a new file do. One
round is four savers on a fresh file; the bounded loop tries up to 3,000 rounds."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver


async def _round(path: Path) -> list[tuple[BaseException, float]]:
    go = asyncio.Event()

    async def one() -> None:
        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            await go.wait()
            await saver.setup()

    async def timed() -> tuple[BaseException, float] | None:
        started = time.monotonic()
        try:
            await one()
        except Exception as exc:
            return exc, time.monotonic() - started
        return None

    tasks = [asyncio.ensure_future(timed()) for _ in range(4)]
    await asyncio.sleep(0.01)  # every saver has opened its connection
    go.set()
    return [r for r in await asyncio.gather(*tasks) if r is not None]


def rounds_until_locked(most: int) -> tuple[int, list[tuple[BaseException, float]]]:
    """Rounds run until one failed (and its errors), or ``most`` and no error."""
    for n in range(1, most + 1):
        with tempfile.TemporaryDirectory(prefix="sqlite-setup-") as directory:
            errors = asyncio.run(_round(Path(directory) / "checkpoints.db"))
        if errors:
            return n, errors
    return most, []


def main() -> None:
    _, errors = rounds_until_locked(3000)
    assert errors, "four setup() calls at once on a fresh file succeeded 3,000 times in a row"
    for error, seconds in errors:
        assert "database is locked" in str(error), errors
        assert seconds < 4, f"database is locked after {seconds:.1f} s: the busy timeout ran out (load), not the race"


if __name__ == "__main__":
    main()
