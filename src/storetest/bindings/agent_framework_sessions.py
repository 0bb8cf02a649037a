"""The binding for a Microsoft Agent Framework ``SessionStore`` (whole sessions: ``get``,
``set``, ``delete``), in one line::

    run_conformance(session_stores(lambda tmp_path: FileSessionStore(tmp_path)))

:func:`session_stores` takes an outer factory (fixtures in, one store out; called twice
with the same fixtures, two stores on one backend). The clauses' transcript goes into
an ``AgentSession`` as the framework's default history keeps it,
``state["in_memory"]["messages"]``, a list of the framework's ``Message`` (text, a
function call with raw ``arguments``, a function result, data:
:func:`~storetest.bindings._agent_framework_messages.from_transcript`): ``save`` is
``set(session_id, session)``, ``messages`` is ``get(session_id)`` (``None``: no
messages) and ``delete`` is ``delete(session_id)``. So the transcript clauses judge a
set racing a set (one of them whole), and the ``deletes`` clauses a delete, and a delete
racing a set (the session gone or whole).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from storetest._engine.harness import StoreShapeError, close_factory, enter_factory
from storetest.bindings._agent_framework_messages import agent_framework, from_transcript, to_transcript
from storetest.bindings._support import close_resource, look_like, run_all
from storetest.contract import Message

__all__ = ["SessionStoreHandle", "SessionStores", "session_stores"]

STORE_METHODS: Final = ("get", "set", "delete")
#: Where the framework's default history provider keeps a session's messages.
SOURCE_ID: Final = "in_memory"

#: Clauses of storetest's own protocol that a SessionStore does not have.
NOT_IN_THE_PROTOCOL: Final = {
    "bad_input_is_rejected": "not in Agent Framework's protocol: the binding builds the AgentSession, so "
    "storetest's own argument checks are not the store's",
}


class SessionStoreHandle:
    """One ``SessionStore``, as the transcript and delete clauses drive it."""

    def __init__(self, store: Any, label: str) -> None:
        self.store = store
        self._label = label
        self.storetest_names = {"save": "set", "messages": "get"}

    def storetest_code(self) -> list[Any]:
        return [self.store]

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        snapshot = agent_framework().AgentSession(session_id=session)
        snapshot.state = {SOURCE_ID: {"messages": from_transcript(messages)}}
        await self.store.set(session, snapshot)

    async def messages(self, session: str) -> list[Message]:
        got = await self.store.get(session)
        if got is None:
            return []
        state = getattr(got, "state", None)
        held = state.get(SOURCE_ID, {}).get("messages", []) if isinstance(state, dict) else state
        return to_transcript(held)  # type: ignore[no-any-return]

    async def delete(self, session: str) -> None:
        await self.store.delete(session)

    def __repr__(self) -> str:
        return f"<{type(self.store).__name__} from the {self._label}>"


class SessionStores:
    """A store factory made of an outer factory (see :func:`session_stores`)."""

    __qualname__: str  # the outer factory's (set by look_like)

    def __init__(self, factory: Any, label: str = "factory") -> None:
        if not callable(factory):
            raise TypeError(
                f"session_stores() takes the outer factory (fixtures in, a SessionStore out), not "
                f"{type(factory).__name__}; e.g. session_stores(lambda tmp_path: FileSessionStore(tmp_path))")
        self.factory = factory
        self.label = label
        look_like(self, factory, "session_stores")
        self.storetest_capabilities = ("transcript", "deletes")
        self.storetest_spawn = (factory, session_stores)
        self.storetest_skip = dict(NOT_IN_THE_PROTOCOL)
        if label == "factory":
            self.storetest_replica: SessionStores | None = SessionStores(factory, "replica")

    def __call__(self, **fixtures: Any) -> AsyncIterator[SessionStoreHandle]:
        return self._handle(fixtures)

    async def _handle(self, fixtures: dict[str, Any]) -> AsyncIterator[SessionStoreHandle]:
        closers: list[Any] = []
        store: Any = None
        try:
            store = await enter_factory(self.label, self.factory, fixtures, closers)
            missing = [m for m in STORE_METHODS if not callable(getattr(store, m, None))]
            if missing:
                raise StoreShapeError(
                    f"the session_stores {self.label} returned {store!r}, which has no {', '.join(missing)}: it "
                    "must return a SessionStore (get, set, delete), e.g. FileSessionStore(tmp_path)")
            # Named after the store's class, so a report names what it judged.
            yield type(type(store).__name__, (SessionStoreHandle,), {})(store, self.label)
        finally:
            steps = [functools.partial(close_resource, store)] if store is not None and any(
                callable(getattr(store, m, None)) for m in ("aclose", "close")) else []
            await run_all(steps + [functools.partial(close_factory, c) for _, c in reversed(closers)])

    def __repr__(self) -> str:
        return f"session_stores({self.__module__}:{self.__qualname__})"


def session_stores(factory: Any) -> SessionStores:
    """Bind a Microsoft Agent Framework ``SessionStore`` (``get``, ``set``, ``delete`` of
    a whole ``AgentSession``) for :func:`~storetest.run_conformance`,
    :func:`storetest.check` and ``storetest check``.

    :param factory: the outer factory: a plain or async function, or a (async)
        generator that tears down after its ``yield``; its parameters are fixtures. It
        returns one store on a backend; called twice with the same fixtures it must
        give two stores on one backend.
    :raises TypeError: ``factory`` is not callable.
    :raises ImportError: agent-framework-core is not installed (``storetest[agent-framework]``).
    """
    agent_framework()
    return SessionStores(factory)
