"""DatabaseSessionService on PostgreSQL refuses an event whose text holds a NUL
(``jsonb``: "unsupported Unicode escape sequence"); on SQLite the same event is kept.
Deterministic."""

from __future__ import annotations

import asyncio
import uuid

from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from storetest import databases


async def _run(url: str) -> None:
    service = DatabaseSessionService(url)
    try:
        session = await service.create_session(app_name="app", user_id="u", session_id=f"s-{uuid.uuid4().hex}")
        event = Event(author="user", content=types.Content(role="user", parts=[types.Part(text="a\x00b")]))
        try:
            await service.append_event(session, event)
        except Exception as exc:
            assert "unsupported Unicode escape sequence" in str(exc), exc
            return
        raise AssertionError("an event with a NUL in its text was stored")
    finally:
        await service.close()


def main(storetest_postgres_url: str | None = None) -> None:
    if storetest_postgres_url is None:
        with databases.throwaway("postgres") as url:
            main(url)
        return
    asyncio.run(_run(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1)))


if __name__ == "__main__":
    main()
