"""SqliteSessionService reads events in timestamp order, not append order: an event
appended later with an earlier timestamp (a replica whose clock is 5 ms behind) is
read back before the events appended before it. Deterministic."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from google.adk.sessions.sqlite_session_service import SqliteSessionService

from tests.ecosystem.repros.adk._order import appended_then_read

T = 1_800_000_000.0


async def _run(path: Path) -> None:
    service = SqliteSessionService(str(path))
    try:
        got = await appended_then_read(service, [("call", T + 0.010), ("response", T + 0.005)])
    finally:
        await service.close()
    assert got == ["response", "call"], f"events came back {got}, in append order"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(Path(tmp) / "adk.db"))


if __name__ == "__main__":
    main()
