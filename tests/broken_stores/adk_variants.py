"""Broken ADK session services: the correct memory service of ``tests/adk_services.py``
changed in one place each, to carry one bug a session service can have."""

from __future__ import annotations

import asyncio
import copy
import re
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.sessions import Session
from google.adk.sessions.base_session_service import ListSessionsResponse

from storetest import adk_sessions
from tests.adk_services import _BACKENDS, MemorySessionService
from tests.broken_stores import BrokenStore


class CreateChecksThenInserts(MemorySessionService):
    """Checks that the id is free, then inserts, with a round trip between and no lock."""

    async def create_session(self, *, app_name: str, user_id: str, state: Any = None, session_id: Any = None) -> Any:
        if (app_name, user_id, session_id) in self.sessions:
            raise AlreadyExistsError(f"session {session_id!r} already exists")
        await asyncio.sleep(0)  # the INSERT's round trip
        s = self.sessions[app_name, user_id, session_id] = Session(app_name=app_name, user_id=user_id,
                                                                  id=session_id, last_update_time=0.0)
        self._apply(s, state or {})
        return self._view(s)


class StateAppliedTwice(MemorySessionService):
    """Applies a delta when the event is appended, and again from the stored events when
    the session is read: an older event's ``app:`` value beats another session's newer one."""

    def _view(self, s: Session, events: bool = True) -> Session:
        view = super()._view(s, events)
        for e in s.events:
            view.state.update({k: v for k, v in (e.actions.state_delta or {}).items()})
        return view


class TempKeysStored(MemorySessionService):
    """Stores the event as given: its ``temp:`` keys stay in the delta and in the state."""

    async def append_event(self, session: Session, event: Any) -> Any:
        async with self.lock:
            s = self.sessions[session.app_name, session.user_id, session.id]
            s.events.append(copy.deepcopy(event))
            for key, value in event.actions.state_delta.items():
                s.state[key] = value
            session.events.append(event)
            return event


class IdsStripped(MemorySessionService):
    """Strips spaces from session ids (as ADK's InMemorySessionService does)."""

    async def create_session(self, *, app_name: str, user_id: str, state: Any = None, session_id: Any = None) -> Any:
        return await super().create_session(app_name=app_name, user_id=user_id, state=state,
                                            session_id=session_id.strip())

    async def get_session(self, *, app_name: str, user_id: str, session_id: str, config: Any = None) -> Any:
        return await super().get_session(app_name=app_name, user_id=user_id, session_id=session_id.strip())


class OrderedByTimestamp(MemorySessionService):
    """Reads events ordered by their timestamp (ties by id), not in the order appended."""

    def _view(self, s: Session, events: bool = True) -> Session:
        view = super()._view(s, events)
        view.events.sort(key=lambda e: (e.timestamp, e.id))
        return view


class DeleteByPrefix(MemorySessionService):
    """Deletes every session whose id starts with the given one (``LIKE 'id%'``)."""

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        for key in [k for k in self.sessions if k[:2] == (app_name, user_id) and k[2].startswith(session_id)]:
            del self.sessions[key]


class ListsTheApp(MemorySessionService):
    """Lists every session of the app, whoever its user."""

    async def list_sessions(self, *, app_name: str, user_id: Any = None) -> Any:
        return await super().list_sessions(app_name=app_name, user_id=None)


class StaleCopyWrittenBack(MemorySessionService):
    """Stores the caller's session object with the new event: the events another caller
    appended since that object was read are lost."""

    async def append_event(self, session: Session, event: Any) -> Any:
        event = await super(MemorySessionService, self).append_event(session, event)
        async with self.lock:
            s = self.sessions[session.app_name, session.user_id, session.id]
            s.events = copy.deepcopy(session.events)
            return event


class TimestampsInMilliseconds(MemorySessionService):
    """Keeps an event's timestamp to the millisecond (a ``DATETIME(3)`` column)."""

    async def append_event(self, session: Session, event: Any) -> Any:
        event = await super().append_event(session, event)
        async with self.lock:
            stored = self.sessions[session.app_name, session.user_id, session.id].events[-1]
            stored.timestamp = round(stored.timestamp, 3)
            return event


class CachedPerService(MemorySessionService):
    """Keeps the sessions it has read in a cache of its own, updated by its own appends only."""

    async def get_session(self, *, app_name: str, user_id: str, session_id: str, config: Any = None) -> Any:
        cache = self.__dict__.setdefault("cache", {})
        key = (app_name, user_id, session_id)
        if key not in cache:
            cache[key] = await super().get_session(app_name=app_name, user_id=user_id, session_id=session_id)
        return copy.deepcopy(cache[key])


class TablesCreatedOnFirstUse(MemorySessionService):
    """Creates its tables on first use, checking first: racing first calls both create."""

    async def _tables(self) -> None:
        if not self.scopes.get("created"):
            await asyncio.sleep(0)  # CREATE TABLE's round trip
            if self.scopes.get("created"):
                raise RuntimeError("table sessions already exists")
            self.scopes["created"] = True

    async def create_session(self, **kwargs: Any) -> Any:
        await self._tables()
        return await super().create_session(**kwargs)

    async def get_session(self, **kwargs: Any) -> Any:
        await self._tables()
        return await super().get_session(**kwargs)


class _JoinedKeys(dict[Any, Any]):
    """A dict of (app, user, session) keys stored under ``app:user:session``."""

    def _k(self, key: Any) -> Any:
        return ":".join(key) if isinstance(key, tuple) else key

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._k(key))[1]

    def __setitem__(self, key: Any, value: Any) -> None:
        joined = self._k(key)
        first = super().get(joined, (key, None))[0]
        super().__setitem__(joined, (first, value))

    def __contains__(self, key: object) -> bool:
        return super().__contains__(self._k(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def pop(self, key: Any, *default: Any) -> Any:
        return super().pop(self._k(key), (None, *default))[1]

    def items(self) -> Any:  # type: ignore[override]
        return [pair for pair in super().values()]


class ColonJoinedKeys(MemorySessionService):
    """Keeps sessions under one string key ``app:user:session``, unescaped: app ``a``
    with user ``b:c`` and app ``a:b`` with user ``c`` are one session."""

    def __init__(self, tmp_path: Any) -> None:
        super().__init__(tmp_path)
        if not isinstance(self.sessions, _JoinedKeys):
            joined = _JoinedKeys()
            for key, value in self.sessions.items():
                joined[key] = value
            self.sessions = joined
            loop = _BACKENDS[str(tmp_path)][0]
            _BACKENDS[str(tmp_path)] = (loop, (self.lock, joined, self.scopes))


class DottedStateKeys(MemorySessionService):
    """A session's own state kept as a document updated by dotted paths (``$set:
    {"state.a.b": v}``): the key ``a.b`` lands as ``b`` inside ``a``, so ``a`` and ``a.b``
    overwrite each other, and ``a.b`` never reads back as a key.

    In the wild: a MongoDB-backed ADK service writing state deltas as ``$set`` paths
    without escaping the dots; a flattened settings store that nests on ``.``.
    """

    def _apply(self, s: Any, delta: dict[str, Any]) -> None:
        plain = {k: v for k, v in delta.items() if "." not in k or k.partition(":")[0] in ("app", "user", "temp")}
        super()._apply(s, plain)
        for key, value in delta.items():
            if key in plain:
                continue
            *path, last = key.split(".")
            target = s.state
            for part in path:
                if not isinstance(target.get(part), dict):
                    target[part] = {}
                target = target[part]
            target[last] = copy.deepcopy(value)


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, cls: type, racy: bool = False) -> BrokenStore:
    return BrokenStore(name, bug, wild, clause, diagnosis, adk_sessions(cls), racy=racy)


BROKEN = [
    _broken("adk-dotted-state-keys", "state keys written as dotted paths (a.b nested under a)",
            "a MongoDB-backed ADK service writing deltas as $set paths", "adk_related_ids_stay_apart",
            "state keys in the initial state merged or changed", DottedStateKeys),
    _broken("adk-colon-joined-keys", "sessions keyed by the unescaped string app:user:session",
            "a third-party ADK service on a key-value store", "adk_sessions_are_isolated",
            "without escaping the separator",
            ColonJoinedKeys),
    _broken("adk-create-check-then-insert", "create_session checks that the id is free, then inserts",
            "a SELECT then an INSERT with no unique key or lock", "adk_create_with_an_id_is_exclusive",
            "checks for the id, then inserts", CreateChecksThenInserts, racy=True),
    _broken("adk-state-applied-twice", "a delta applied on append and again from the events on read",
            "state rebuilt by replaying events over stored scopes", "adk_state_deltas_apply_by_scope",
            "state differs at", StateAppliedTwice),
    _broken("adk-temp-keys-stored", "temp: keys kept in the stored event and state",
            "an append_event override that skips the base class", "adk_state_deltas_apply_by_scope",
            "a temp: key was stored", TempKeysStored),
    _broken("adk-ids-stripped", "session ids stripped of spaces", "ADK's InMemorySessionService",
            "adk_sessions_are_isolated", "ids are merged", IdsStripped),
    _broken("adk-ordered-by-timestamp", "events read in timestamp order", "ORDER BY timestamp, id",
            "adk_events_keep_append_order", "different order than appended", OrderedByTimestamp),
    _broken("adk-delete-by-prefix", "delete_session removes every id it prefixes", "DELETE ... WHERE id LIKE 'x%'",
            "adk_delete_removes_only_that_session", "deleting another session changed this one", DeleteByPrefix),
    _broken("adk-list-the-app", "list_sessions ignores the user", "a query filtered by app only",
            "adk_list_sessions_lists_the_users", "not list exactly the user's sessions", ListsTheApp),
    _broken("adk-stale-copy-written-back", "append_event stores the caller's stale events list",
            "a document store writing the whole session back", "adk_stale_session_append_loses_nothing",
            "lost", StaleCopyWrittenBack),
    _broken("adk-timestamps-in-milliseconds", "event timestamps kept to the millisecond", "a DATETIME(3) column",
            "adk_events_round_trip_exactly", "timestamp", TimestampsInMilliseconds),
    _broken("adk-cached-per-service", "a per-service cache of sessions read", "a cache in front of the database",
            "adk_replicas_see_each_others_appends", "read through the", CachedPerService),
    _broken("adk-tables-on-first-use", "tables created on first use by check-then-create",
            "CREATE TABLE without IF NOT EXISTS", "adk_first_calls_on_a_fresh_backend_succeed",
            "already exists", TablesCreatedOnFirstUse, racy=True),
]


class IgnoresGetSessionConfig(MemorySessionService):
    """``get_session`` takes ``config`` and never reads it: every event, whatever
    ``num_recent_events`` and ``after_timestamp`` say."""

    async def get_session(self, *, app_name: str, user_id: str, session_id: str, config: Any = None) -> Any:
        return await super().get_session(app_name=app_name, user_id=user_id, session_id=session_id)


class ListsWithEvents(MemorySessionService):
    """``list_sessions`` returns each session whole, its events too (a listing that
    reuses the read of one session)."""

    async def list_sessions(self, *, app_name: str, user_id: Any = None) -> Any:
        return ListSessionsResponse(sessions=[self._view(s) for (a, u, _), s in self.sessions.items()
                                              if a == app_name and user_id in (u, None)])


BROKEN += [
    _broken("adk-ignores-get-session-config", "get_session ignores GetSessionConfig",
            "a service written against get_session's older signature", "adk_get_session_options_select_events",
            "num_recent_events=0", IgnoresGetSessionConfig),
    _broken("adk-lists-with-events", "list_sessions returns sessions with their events",
            "a listing that reuses the read of one session", "adk_list_sessions_lists_the_users",
            "a listed session carries none", ListsWithEvents),
]


class DeleteByKeyPattern(MemorySessionService):
    """``delete_session`` deletes the session's key and every key under it
    (``DEL app:user:sid`` and ``SCAN MATCH app:user:sid:*`` for its events): session
    ``sid:y``, whose keys sit under ``sid:``, goes too."""

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        for key in [k for k in self.sessions if k[:2] == (app_name, user_id)
                    and (k[2] == session_id or k[2].startswith(f"{session_id}:"))]:
            self.sessions.pop(key)


BROKEN.append(_broken("adk-delete-by-key-pattern", "delete_session deletes every key under the session's",
                      "Redis keys app:user:sid and SCAN MATCH app:user:sid:*", "adk_delete_removes_only_that_session",
                      "deleting another session changed this one", DeleteByKeyPattern))


class DeleteByLike(MemorySessionService):
    """``delete_session`` deletes ``WHERE id LIKE :sid`` with the id as the pattern,
    where ``=`` was meant: SQLite's and MySQL's ``LIKE`` ignore ASCII case (and read
    ``%`` and ``_`` as wildcards), so deleting ``Case`` also deletes ``case``. Reads
    are exact."""

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in session_id)
        for key in [k for k in self.sessions if k[:2] == (app_name, user_id)
                    and re.fullmatch(pattern, k[2], re.IGNORECASE | re.ASCII | re.DOTALL)]:
            self.sessions.pop(key)


BROKEN.append(_broken("adk-delete-by-like", "delete_session deletes WHERE id LIKE <id>, which ignores ASCII case",
                      "a LIKE where = was meant (SQLite's and MySQL's LIKE are case-insensitive)",
                      "adk_delete_removes_only_that_session", "(case:", DeleteByLike))
