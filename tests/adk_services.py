"""A correct Google ADK session service, in memory, in under 60 lines: a backend per
directory (a clause's two handles share it), one lock, copies in and out, state kept
by scope; ADK's base class trims ``temp:`` keys from an event before it is stored."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import ListSessionsResponse

from storetest import adk_sessions

_BACKENDS: dict[str, tuple[asyncio.AbstractEventLoop, Any]] = {}


class MemorySessionService(BaseSessionService):
    def __init__(self, tmp_path: Path) -> None:
        loop, known = asyncio.get_running_loop(), _BACKENDS.get(str(tmp_path))
        if known is None or known[0] is not loop:  # an asyncio.Lock belongs to one loop
            known = _BACKENDS[str(tmp_path)] = (loop, (asyncio.Lock(), {}, {}))
        self.lock, self.sessions, self.scopes = known[1]

    def _view(self, s: Session, events: bool = True) -> Session:
        app, user = self.scopes.get(("app", s.app_name), {}), self.scopes.get(("user", s.app_name, s.user_id), {})
        state = {**s.state, **{f"app:{k}": v for k, v in app.items()}, **{f"user:{k}": v for k, v in user.items()}}
        return copy.deepcopy(s.model_copy(update={"state": state, "events": s.events if events else []}))

    def _apply(self, s: Session, delta: dict[str, Any]) -> None:
        for key, value in copy.deepcopy(delta).items():
            scope, _, name = key.partition(":")
            if scope in ("app", "user") and name:
                where = ("app", s.app_name) if scope == "app" else ("user", s.app_name, s.user_id)
                self.scopes.setdefault(where, {})[name] = value
            elif scope != "temp" or not name:
                s.state[key] = value

    async def create_session(self, *, app_name: str, user_id: str, state: Any = None, session_id: Any = None) -> Any:
        async with self.lock:
            await asyncio.sleep(0)  # a round trip: racing callers run here
            if (app_name, user_id, session_id) in self.sessions:
                raise AlreadyExistsError(f"session {session_id!r} already exists")
            s = self.sessions[app_name, user_id, session_id] = Session(app_name=app_name, user_id=user_id,
                                                                      id=session_id, last_update_time=0.0)
            self._apply(s, state or {})
            return self._view(s)

    async def get_session(self, *, app_name: str, user_id: str, session_id: str, config: Any = None) -> Any:
        s = self.sessions.get((app_name, user_id, session_id))
        if s is None or config is None:
            return None if s is None else self._view(s)
        view = self._view(s)
        after, recent = config.after_timestamp, config.num_recent_events
        kept = [e for e in view.events if after is None or e.timestamp >= after]
        return view.model_copy(update={"events": kept[len(kept) - min(recent, len(kept)):] if recent is not None
                                       else kept})

    async def list_sessions(self, *, app_name: str, user_id: Any = None) -> Any:
        return ListSessionsResponse(sessions=[self._view(s, events=False) for (a, u, _), s in self.sessions.items()
                                              if a == app_name and user_id in (u, None)])

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        self.sessions.pop((app_name, user_id, session_id), None)

    async def append_event(self, session: Session, event: Any) -> Any:
        event = await super().append_event(session, event)  # trims temp: keys from the delta
        async with self.lock:
            await asyncio.sleep(0)
            s = self.sessions[session.app_name, session.user_id, session.id]
            s.events.append(copy.deepcopy(event))
            self._apply(s, event.actions.state_delta)
            return event


memory_adk = adk_sessions(MemorySessionService)
