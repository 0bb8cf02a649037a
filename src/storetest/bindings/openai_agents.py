"""The binding for an item history (an OpenAI Agents ``Session``), in one line::

    run_conformance(item_sessions(lambda tmp_path: lambda id: SQLiteSession(id, tmp_path / "s.db")))

:func:`item_sessions` takes an *outer factory*: its parameters are fixtures (``tmp_path``,
``storetest_postgres_url``...), it sets up one handle on a backend and returns an
*opener*, ``session_id -> session``. The binding calls the outer factory once per
handle (twice in a replica clause, with the same fixtures, so both handles reach one
backend), opens each session id once per handle and reuses that object (a
``SQLiteSession(":memory:")`` is a database per object), and closes every session it
opened, then the outer factory's own resources (a generator factory's code after its
``yield``). The session's four methods are all the binding knows of it (duck typing):
storetest never imports an SDK.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, TypeVar

from storetest._engine.harness import StoreShapeError, close_factory, enter_factory
from storetest._engine.stops import in_thread
from storetest.bindings._support import close_resource, look_like, run_all
from storetest.items import ITEM_METHODS, Item, ItemSession

__all__ = ["ItemHistory", "ItemSessions", "item_sessions", "owned"]

T = TypeVar("T")

# The resources the outer factory now running hands to owned(), for its handle to close.
_OWNED: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("storetest_owned", default=None)

_NOT_AN_OPENER: Final = (
    "the item_sessions factory returned {got!r}, not an opener: it must return a callable "
    "taking a session id and returning that conversation's session, e.g. "
    "item_sessions(lambda tmp_path: lambda id: SQLiteSession(id, tmp_path / 's.db'))"
)


class ItemHistory:
    """One handle on an item-history backend, as the clauses drive it: each method
    takes the session id first and goes to that id's session object, opened once."""

    def __init__(self, opener: Callable[[str], Any], label: str) -> None:
        self._opener = opener
        self._label = label
        self._sessions: dict[str, Any] = {}

    def session(self, session_id: str) -> ItemSession:
        """The session object for ``session_id`` on this handle, opened on first use.

        :raises StoreShapeError: (a TypeError) the opener returned something without the four methods.
        """
        if session_id in self._sessions:
            return self._sessions[session_id]  # type: ignore[no-any-return]
        opened = self._opener(session_id)
        missing = [m for m in ITEM_METHODS if not callable(getattr(opened, m, None))]
        if missing:
            raise StoreShapeError(
                f"the {self._label}'s opener returned {opened!r} for session {session_id!r}, which has "
                f"no {', '.join(missing)}: an item session has {', '.join(ITEM_METHODS)}"
            )
        self._sessions[session_id] = opened
        return opened  # type: ignore[no-any-return]

    def storetest_store_name(self) -> str:
        """The class of the store under test: of the sessions this handle opened, or of
        what its opener makes (a class, or a partial of one); "" before either is known."""
        for opened in self._sessions.values():
            return type(opened).__name__
        made = self._opener.func if isinstance(self._opener, functools.partial) else self._opener
        return made.__name__ if isinstance(made, type) else ""

    def storetest_code(self) -> list[Any]:
        """What holds the store's own code (for the frames a failure shows): the
        sessions opened, else the opener."""
        return [*self._sessions.values(), self._opener]

    async def _call(self, session_id: str, name: str, *args: object) -> Any:
        method = getattr(self.session(session_id), name)
        if inspect.iscoroutinefunction(method):
            return await method(*args)
        return await in_thread(method, *args)  # a plain session: driven from threads (abandoned past the deadline)

    async def get_items(self, session_id: str, limit: int | None = None) -> list[Item]:
        return await self._call(session_id, "get_items", *(() if limit is None else (limit,)))  # type: ignore[no-any-return]

    async def add_items(self, session_id: str, items: list[Item]) -> None:
        await self._call(session_id, "add_items", items)

    async def pop_item(self, session_id: str) -> Item | None:
        return await self._call(session_id, "pop_item")  # type: ignore[no-any-return]

    async def clear_session(self, session_id: str) -> None:
        await self._call(session_id, "clear_session")

    async def open_session(self, session_id: str) -> None:
        """Open (construct) the session for ``session_id`` and call nothing on it: what
        the constructor race of a fresh backend races."""
        self.session(session_id)

    async def aclose(self) -> None:
        """Close every session this handle opened (``close()``, awaited when async);
        every one is tried, and the first error is raised after."""
        errors: list[BaseException] = []
        for opened in self._sessions.values():
            close = getattr(opened, "close", None)
            if not callable(close):
                continue
            try:
                result = close()
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                errors.append(exc)
        self._sessions.clear()
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        return f"<item history from the {self._label}: {len(self._sessions)} session(s) open>"


class ItemSessions:
    """A store factory made of an outer factory (see :func:`item_sessions`): calling it
    with the outer factory's fixtures opens one :class:`ItemHistory` handle, and
    ``storetest_replica`` opens a second one on the same backend."""

    __qualname__: str  # the outer factory's (set by look_like)

    def __init__(self, factory: Callable[..., Any], label: str = "factory") -> None:
        if not callable(factory):
            raise TypeError(
                f"item_sessions() takes the outer factory (fixtures in, an opener out), not "
                f"{type(factory).__name__}; e.g. item_sessions(lambda tmp_path: lambda id: MySession(id, tmp_path))"
            )
        self.factory = factory
        self.label = label
        look_like(self, factory, "item_sessions")
        self.storetest_capabilities = ("items",)  # known before any handle is opened
        #: What a child process imports to open this binding (storetest._engine.backends).
        self.storetest_spawn = (factory, item_sessions)
        if label == "factory":
            self.storetest_replica: ItemSessions | None = ItemSessions(factory, "replica")

    def __call__(self, **fixtures: Any) -> AsyncIterator[ItemHistory]:
        return self._handle(fixtures)

    async def _handle(self, fixtures: dict[str, Any]) -> AsyncIterator[ItemHistory]:
        closers: list[Any] = []
        resources: list[Any] = []
        token = _OWNED.set(resources)
        history: ItemHistory | None = None
        try:
            try:
                opener = await enter_factory(self.label, self.factory, fixtures, closers)
            finally:
                _OWNED.reset(token)
            self._refuse_unless_opener(opener)
            history = self._history(opener)
            yield history
        finally:
            # Sessions first, then what they used, then the factory's own teardown; a
            # failing close never skips the next one.
            steps = [history.aclose] if history is not None else []
            steps += [functools.partial(close_resource, r) for r in reversed(resources)]
            steps += [functools.partial(close_factory, c) for _, c in reversed(closers)]
            await run_all(steps)

    def _refuse_unless_opener(self, made: object) -> None:
        """Raise TypeError unless the outer factory returned what ``_history`` takes."""
        if not callable(made):  # a session class is an opener: SQLiteSession(session_id)
            raise TypeError(_NOT_AN_OPENER.format(got=made))

    def _history(self, opener: Callable[[str], Any]) -> ItemHistory:
        """The handle over ``opener`` (a binding of another protocol makes its own)."""
        return ItemHistory(opener, self.label)

    def __repr__(self) -> str:
        return f"item_sessions({self.__module__}:{self.__qualname__})"


def item_sessions(factory: Callable[..., Any]) -> ItemSessions:
    """Bind an item history (an OpenAI Agents ``Session``, or anything with its four
    async methods) for :func:`~storetest.run_conformance`, :func:`storetest.check` and
    ``storetest check``.

    :param factory: the outer factory: a plain or async function, or a (async)
        generator that tears down after its ``yield``; its parameters are fixtures,
        filled by name. It sets up one handle on the backend (a file, an engine, a
        client) and returns an opener, ``session_id -> session``. Called twice with the
        same fixtures, it must give two handles on one backend: the replica clauses
        use the second.
    :raises TypeError: ``factory`` is not callable.
    """
    return ItemSessions(factory)


def owned(resource: T) -> T:
    """Hand ``resource`` (an engine, a client, a pool) to the handle the outer factory
    is opening, which closes it after its sessions: ``await dispose()``, ``aclose()`` or
    ``close()``, whichever it has. Returns ``resource``, so a one-line factory can write
    ``partial(SQLAlchemySession, engine=owned(create_async_engine(url)))``.

    :raises RuntimeError: called outside an item_sessions outer factory.
    """
    resources = _OWNED.get()
    if resources is None:
        raise RuntimeError("owned() is for use inside an item_sessions outer factory, while it runs")
    resources.append(resource)
    return resource
