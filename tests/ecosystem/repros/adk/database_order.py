"""DatabaseSessionService reads events ordered by timestamp, then by id: events sharing
a timestamp (one clock tick) come back in the order of their ids, not as appended.
Deterministic: the ids are chosen so that their order is not the append order."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from google.adk.sessions import DatabaseSessionService

from tests.ecosystem.repros.adk._order import appended_then_read

T = 1_800_000_000.0


async def _run(url: str) -> None:
    service = DatabaseSessionService(url)
    try:
        got = await appended_then_read(service, [("b-first", T), ("a-second", T)])
    finally:
        await service.close()
    assert got == ["a-second", "b-first"], f"events came back {got}, in append order"


def run_on(url: str) -> None:
    """The repro on the database ``url`` (a SQLAlchemy async URL)."""
    asyncio.run(_run(url))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(f"sqlite+aiosqlite:///{Path(tmp) / 'adk.db'}"))


if __name__ == "__main__":
    main()
