"""SqliteSessionService strips spaces from session ids: "abc " is session "abc".

Creating "abc " after "abc" raises AlreadyExistsError, and reading "abc " returns
"abc"'s events. Deterministic."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events import Event
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types


async def _run(path: Path) -> None:
    service = SqliteSessionService(str(path))
    try:
        session = await service.create_session(app_name="app", user_id="u", session_id="abc")
        await service.append_event(session, Event(author="user", content=types.Content(
            role="user", parts=[types.Part(text="said in abc")])))
        try:
            await service.create_session(app_name="app", user_id="u", session_id="abc ")
            raise AssertionError("creating 'abc ' after 'abc' worked: the ids are kept apart")
        except AlreadyExistsError:
            pass
        other = await service.get_session(app_name="app", user_id="u", session_id="abc ")
        assert other is not None and other.id == "abc", f"get_session('abc ') gave {other!r}"
        assert other.events[0].content.parts[0].text == "said in abc"
    finally:
        await service.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(Path(tmp) / "adk.db"))


if __name__ == "__main__":
    main()
