"""The binding for a Google ADK session service (``google.adk.sessions.BaseSessionService``),
in one line::

    run_conformance(adk_sessions(lambda tmp_path: SqliteSessionService(str(tmp_path / "s.db"))))

:func:`adk_sessions` takes an *outer factory*: its parameters are fixtures (``tmp_path``,
``storetest_postgres_url``...) and it returns one service on a backend. The binding
calls it once per handle (twice in a replica clause, with the same fixtures, so both
services reach one database), drives the service through ADK's keyword-only methods
(``create_session``, ``get_session``, ``list_sessions``, ``append_event``,
``delete_session``) and closes it afterwards (``close()``, awaited), then a generator
factory's teardown.

The values the clauses send are ADK's own (:func:`event`: an ``Event`` with text,
function calls and responses, ``actions.state_delta``). ADK is imported when first
needed, never by ``import storetest``; without it the error names ``storetest[adk]``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator
from typing import Any, Final

from storetest._engine.harness import close_factory, enter_factory
from storetest.bindings._support import look_like, run_all

__all__ = ["ADK_METHODS", "AdkService", "AdkSessions", "adk", "adk_sessions", "dump", "event"]

#: What the clauses call on a handle (positional: the binding passes ADK's keywords).
ADK_METHODS: Final = ("create_session", "get_session", "list_sessions", "append_event", "delete_session")

_MISSING_ADK: Final = (
    "the ADK binding needs Google ADK: pip install 'storetest[adk]' (google-adk and the drivers "
    "its DatabaseSessionService uses)"
)


def adk() -> Any:
    """The ADK modules the binding uses, as a namespace (``adk().Event``, ``adk().types``...).

    :raises ImportError: google-adk is not installed (the message names ``storetest[adk]``).
    """
    try:
        from google.adk.errors.already_exists_error import AlreadyExistsError
        from google.adk.events import Event, EventActions
        from google.genai import types
    except ImportError as exc:
        raise ImportError(_MISSING_ADK) from exc
    import types as _types

    return _types.SimpleNamespace(Event=Event, EventActions=EventActions, types=types,
                                  AlreadyExistsError=AlreadyExistsError)


def event(author: str, *, texts: tuple[str, ...] = (), calls: tuple[tuple[str, str, dict[str, Any]], ...] = (),
          responses: tuple[tuple[str, str, dict[str, Any]], ...] = (), state_delta: dict[str, Any] | None = None,
          timestamp: float | None = None, event_id: str | None = None, invocation_id: str = "inv") -> Any:
    """An ADK ``Event`` by ``author``: a part per text, per function call ``(id, name,
    args)`` and per function response ``(id, name, response)``, in that order; the
    state delta in ``actions``; ``timestamp`` and ``event_id`` if given (else ADK's own)."""
    a = adk()
    parts = [a.types.Part(text=t) for t in texts]
    parts += [a.types.Part(function_call=a.types.FunctionCall(id=i, name=n, args=args)) for i, n, args in calls]
    parts += [a.types.Part(function_response=a.types.FunctionResponse(id=i, name=n, response=r))
              for i, n, r in responses]
    role = "user" if author == "user" else "model"
    fields: dict[str, Any] = {"author": author, "invocation_id": invocation_id,
                              "content": a.types.Content(role=role, parts=parts) if parts else None,
                              "actions": a.EventActions(state_delta=dict(state_delta or {}))}
    if timestamp is not None:
        fields["timestamp"] = timestamp
    if event_id is not None:
        fields["id"] = event_id
    return a.Event(**fields)


def dump(value: Any) -> Any:
    """ADK's own ``model_dump()`` of an event or session (what the clauses compare,
    type for type); anything else as it is."""
    return value.model_dump() if callable(getattr(value, "model_dump", None)) else value


class AdkService:
    """One handle on an ADK session service, as the clauses drive it: ADK's methods
    with positional arguments, ``list_sessions`` giving the list of sessions."""

    def __init__(self, service: Any, label: str) -> None:
        missing = [m for m in ADK_METHODS if not callable(getattr(service, m, None))]
        if missing:
            raise TypeError(
                f"the {label} of adk_sessions returned {service!r}, which has no {', '.join(missing)}: "
                "it must return an ADK session service (a google.adk.sessions.BaseSessionService)"
            )
        self.service = service
        self._label = label

    def storetest_code(self) -> list[Any]:
        """What holds the store's own code (for the frames a failure shows)."""
        return [self.service]

    async def create_session(self, app: str, user: str, state: dict[str, Any] | None, session_id: str) -> Any:
        return await self.service.create_session(app_name=app, user_id=user, state=state, session_id=session_id)

    async def get_session(self, app: str, user: str, session_id: str, options: dict[str, Any] | None = None) -> Any:
        """ADK's ``get_session``; ``options`` given, with ``config=GetSessionConfig(**options)``."""
        if options is None:
            return await self.service.get_session(app_name=app, user_id=user, session_id=session_id)
        from google.adk.sessions.base_session_service import GetSessionConfig

        return await self.service.get_session(app_name=app, user_id=user, session_id=session_id,
                                              config=GetSessionConfig(**options))

    async def list_sessions(self, app: str, user: str | None) -> list[Any]:
        """ADK's ``list_sessions``: a user's sessions, or with ``user=None`` every user's in ``app``."""
        return list((await self.service.list_sessions(app_name=app, user_id=user)).sessions)

    async def append_event(self, session: Any, new_event: Any) -> Any:
        return await self.service.append_event(session, new_event)

    async def delete_session(self, app: str, user: str, session_id: str) -> None:
        await self.service.delete_session(app_name=app, user_id=user, session_id=session_id)

    def __repr__(self) -> str:
        return f"<ADK session service from the {self._label}: {type(self.service).__name__}>"


class AdkSessions:
    """A store factory made of an outer factory (see :func:`adk_sessions`): calling it
    with the outer factory's fixtures opens one :class:`AdkService` handle, and
    ``storetest_replica`` opens a second one on the same backend."""

    __qualname__: str  # the outer factory's (set by look_like)

    def __init__(self, factory: Any, label: str = "factory") -> None:
        if not callable(factory):
            raise TypeError(
                f"adk_sessions() takes the outer factory (fixtures in, a session service out), not "
                f"{type(factory).__name__}; e.g. adk_sessions(lambda tmp_path: SqliteSessionService(...))"
            )
        self.factory = factory
        self.label = label
        look_like(self, factory, "adk_sessions")
        self.storetest_capabilities = ("adk",)
        self.storetest_spawn = (factory, adk_sessions)
        if label == "factory":
            self.storetest_replica: AdkSessions | None = AdkSessions(factory, "replica")

    def __call__(self, **fixtures: Any) -> AsyncIterator[AdkService]:
        return self._handle(fixtures)

    async def _handle(self, fixtures: dict[str, Any]) -> AsyncIterator[AdkService]:
        closers: list[Any] = []
        service: Any = None
        try:
            service = await enter_factory(self.label, self.factory, fixtures, closers)
            # Named after the service's class, so a report names what it judged.
            yield type(type(service).__name__, (AdkService,), {})(service, self.label)
        finally:
            await run_all([functools.partial(_close, service)]
                           + [functools.partial(close_factory, c) for _, c in reversed(closers)])

    def __repr__(self) -> str:
        return f"adk_sessions({self.__module__}:{self.__qualname__})"


async def _close(service: Any) -> None:
    close = getattr(service, "close", None)
    if callable(close):
        result = close()
        if inspect.isawaitable(result):
            await result


def adk_sessions(factory: Any) -> AdkSessions:
    """Bind a Google ADK session service for :func:`~storetest.run_conformance`,
    :func:`storetest.check` and ``storetest check``.

    :param factory: the outer factory: a plain or async function, or a (async)
        generator that tears down after its ``yield``; its parameters are fixtures,
        filled by name. It returns one session service on the backend; called twice
        with the same fixtures, it must give two services on one backend (two engines
        on one database): the replica clauses use the second.
    :raises TypeError: ``factory`` is not callable.
    """
    return AdkSessions(factory)
