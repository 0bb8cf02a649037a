"""Shared by the order repros: append events, read them back, return their texts."""

from __future__ import annotations

import uuid
from typing import Any

from google.adk.events import Event
from google.genai import types


async def appended_then_read(service: Any, stamps: list[tuple[str, float]]) -> list[str]:
    """Append one event per ``(id, timestamp)`` (its text is its id) to a new session and
    return the texts of the events ``get_session`` gives back, in its order."""
    sid = f"s-{uuid.uuid4().hex}"  # a database the other repros share under pytest
    session = await service.create_session(app_name="app", user_id="u", session_id=sid)
    for event_id, stamp in stamps:
        content = types.Content(role="model", parts=[types.Part(text=event_id)])
        await service.append_event(session, Event(id=event_id, timestamp=stamp, author="agent", content=content))
    got = await service.get_session(app_name="app", user_id="u", session_id=sid)
    return [e.content.parts[0].text for e in got.events]
