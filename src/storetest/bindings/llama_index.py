"""The binding for a LlamaIndex chat store, in one line::

    run_conformance(llama_index_chat_stores(lambda tmp_path: SimpleChatStore()))
    run_conformance(llama_index_db_chat_stores(lambda tmp_path: SQLAlchemyChatStore(
        "chat", f"sqlite+aiosqlite:///{tmp_path}/chat.db")))

The outer factory (fixtures in) returns the store itself; a chat store keeps every
conversation under a key, which is the clauses' session id. Called twice with the same
fixtures it must give a second handle on the same data (the replica clauses).

:func:`llama_index_chat_stores` drives a ``BaseChatStore``: ``get_messages``,
``add_message``, ``delete_last_message`` (as ``pop_item``), ``delete_messages``,
``set_messages``, ``delete_message`` and ``get_keys``, from threads, or their async twins
with ``asynchronous=True``. :func:`llama_index_db_chat_stores` drives the async
``AsyncDBChatStore`` (``SQLAlchemyChatStore``): ``add_messages`` is its batch, and
``count_messages``, ``delete_oldest_messages`` and ``archive_oldest_messages`` have clauses
of their own (:mod:`storetest.clauses.chat_stores`). ``neighbour=``, an outer factory of
the same fixtures, opens another application's store on the same backend (another
table, the same Redis database): ``get_keys`` must not list its keys.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from storetest._engine.harness import StoreShapeError, close_factory, enter_factory, parameter_names
from storetest._engine.stops import in_thread
from storetest.bindings._llama_index_messages import chat_protocol, llama_types, to_item, to_message
from storetest.bindings._support import close_resource, run_all
from storetest.bindings.openai_agents import _OWNED, ItemHistory, ItemSessions
from storetest.items import Item

__all__ = ["ChatStore", "ChatStores", "llama_index_chat_stores", "llama_index_db_chat_stores"]

_SYNC: Final = {"get": "get_messages", "add": "add_message", "pop": "delete_last_message", "clear": "delete_messages",
                "set": "set_messages", "delete": "delete_message", "keys": "get_keys"}
_ASYNC: Final = {"get": "aget_messages", "add": "async_add_message", "pop": "adelete_last_message",
                 "clear": "adelete_messages", "set": "aset_messages", "delete": "adelete_message", "keys": "aget_keys"}
_DB: Final = {"get": "get_messages", "add": "add_messages", "clear": "delete_messages", "set": "set_messages",
              "delete": "delete_message", "keys": "get_keys", "count": "count_messages",
              "oldest": "delete_oldest_messages", "archive": "archive_oldest_messages"}

#: What a chat store's protocol does not have, and why those clauses are skipped.
NOT_IN_THE_PROTOCOL: Final = {
    "get_items_gives_the_latest": "not in LlamaIndex's protocol: get_messages has no limit on the latest",
    **{name: "not in LlamaIndex's protocol: BaseChatStore adds one message at a time (add_message), it has no "
       "batch to keep whole" for name in ("a_batch_is_atomic_to_readers", "concurrent_batches_never_interleave")},
}
NOT_IN_THE_DB_PROTOCOL: Final = {
    "get_items_gives_the_latest": NOT_IN_THE_PROTOCOL["get_items_gives_the_latest"],
    **{name: "not in LlamaIndex's protocol: AsyncDBChatStore has no delete_last_message"
       for name in ("pop_item_takes_the_newest", "pop_item_hands_each_item_out_once")},
}
#: Clauses asking more than LlamaIndex documents, and what it documents instead.
BEYOND_THE_PROTOCOL: Final = {
    "items_are_not_aliased": "LlamaIndex does not document whether get_messages returns a copy, nor whether a "
    "store keeps the caller's ChatMessage objects",
    "set_messages_is_atomic_to_readers": "LlamaIndex documents set_messages as 'Set messages for a key', not as one "
    "atomic write; replicas sharing a store need it atomic",
    "delete_message_with_a_negative_index": "LlamaIndex does not say what delete_message(key, -1) does "
    "(SimpleChatStore counts it from the end, the SQL and Redis stores answer None)",
}


class ChatStore(ItemHistory):
    """One handle on a LlamaIndex chat store, as the clauses drive it: items in,
    ``ChatMessage`` objects to the store, items out (:mod:`storetest.bindings._llama_index_messages`)."""

    def __init__(self, store: Any, label: str, asynchronous: bool, db: bool) -> None:
        super().__init__(lambda key: store, label)
        self.store = store
        self.asynchronous = asynchronous or db
        self.methods = _DB if db else _ASYNC if asynchronous else _SYNC
        self.storetest_protocol = chat_protocol(pops=not db, atomic_batches=db)
        self.storetest_names = {"get_items": self.methods["get"], "add_items": self.methods["add"],
                                "pop_item": self.methods.get("pop", "pop_item"), "clear_session": self.methods["clear"]}
        #: A plain store's calls run on threads: past the deadline one is abandoned, not cancelled.
        self.storetest_threaded = not self.asynchronous
        #: Another application's store on the same backend (``neighbour=``), or None.
        self.neighbour: Any = None
        #: The messages last passed and returned, per key (the aliasing clause: a caller holds those).
        self.passed: dict[str, list[Any]] = {}
        self.returned: dict[str, object] = {}

    def storetest_code(self) -> list[Any]:
        return [self.store]

    async def open_session(self, session_id: str) -> None:
        """Nothing to construct per key: the factory made the one store every key is in."""

    async def _do(self, op: str, *args: object, store: Any = None) -> Any:
        method = getattr(store if store is not None else self.store, self.methods[op])
        if self.asynchronous:
            return await method(*args)
        return await in_thread(method, *args)

    async def get_items(self, session_id: str, limit: int | None = None) -> list[Item]:
        if limit is not None:
            raise TypeError("a LlamaIndex chat store has no limit on the latest messages")
        got = await self._do("get", session_id)
        self.returned[session_id] = got
        return [to_item(m) for m in got] if isinstance(got, list) else got

    async def add_items(self, session_id: str, items: list[Item], store: Any = None) -> None:
        messages = [to_message(i) for i in items]
        self.passed[session_id] = messages
        if "pop" not in self.methods:  # AsyncDBChatStore: add_messages, one INSERT
            if messages:
                await self._do("add", session_id, messages, store=store)
            return
        for message in messages:
            await self._do("add", session_id, message, store=store)

    async def pop_item(self, session_id: str) -> Item | None:
        if "pop" not in self.methods:
            raise TypeError("an AsyncDBChatStore has no delete_last_message (its pop clauses are skipped)")
        return _item_or_none(await self._do("pop", session_id))

    async def clear_session(self, session_id: str) -> None:
        await self._do("clear", session_id)

    async def set_messages(self, session_id: str, items: list[Item]) -> None:
        await self._do("set", session_id, [to_message(i) for i in items])

    async def delete_message(self, session_id: str, idx: int) -> Item | None:
        return _item_or_none(await self._do("delete", session_id, idx))

    async def get_keys(self) -> object:
        return await self._do("keys")

    async def add_as_neighbour(self, session_id: str, items: list[Item]) -> None:
        """Add through ``neighbour=``'s store (another application's, on the same backend)."""
        await self.add_items(session_id, items, store=self.neighbour)

    async def aclose(self) -> None:
        self._sessions.clear()

    def __repr__(self) -> str:
        return f"<LlamaIndex chat store {type(self.store).__name__} from the {self._label}>"


class DBChatStore(ChatStore):
    """A handle on an ``AsyncDBChatStore``: also its count, delete-oldest and archive."""

    async def count_messages(self, session_id: str, archived: bool = False) -> object:
        status = llama_status().ARCHIVED if archived else llama_status().ACTIVE
        return await self.store.count_messages(session_id, status=status)

    async def delete_oldest_messages(self, session_id: str, n: int) -> object:
        got = await self.store.delete_oldest_messages(session_id, n)
        return [to_item(m) for m in got] if isinstance(got, list) else got

    async def archive_oldest_messages(self, session_id: str, n: int) -> object:
        got = await self.store.archive_oldest_messages(session_id, n)
        return [to_item(m) for m in got] if isinstance(got, list) else got

    async def archived_items(self, session_id: str) -> object:
        got = await self.store.get_messages(session_id, status=llama_status().ARCHIVED)
        return [to_item(m) for m in got] if isinstance(got, list) else got


class ChatStores(ItemSessions):
    """A store factory made of an outer factory (see :func:`llama_index_chat_stores`)."""

    def __init__(self, factory: Callable[..., Any], label: str = "factory", *, asynchronous: bool = False,
                 db: bool = False, neighbour: Callable[..., Any] | None = None) -> None:
        name = "llama_index_db_chat_stores" if db else "llama_index_chat_stores"
        for what, fn in (("factory", factory), ("neighbour", neighbour)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{name}() takes {what}= as an outer factory (fixtures in, a chat store out), not "
                                f"{type(fn).__name__}; e.g. {name}(lambda tmp_path: SimpleChatStore())")
        super().__init__(factory, label)
        self.asynchronous, self.db, self.neighbour = asynchronous, db, neighbour
        self.storetest_capabilities = ("items", "llama_index", *(("llama_index_db",) if db else ()))
        self.storetest_spawn = (factory, _SPAWN[(asynchronous and not db, db)])
        self.storetest_skip = NOT_IN_THE_DB_PROTOCOL if db else NOT_IN_THE_PROTOCOL
        self.storetest_beyond = BEYOND_THE_PROTOCOL
        if label == "factory":
            self.storetest_replica = ChatStores(factory, "replica", asynchronous=asynchronous, db=db)

    def _refuse_unless_opener(self, opener: Any) -> None:
        methods = (_DB if self.db else _ASYNC if self.asynchronous else _SYNC).values()
        missing = [m for m in methods if not callable(getattr(opener, m, None))]
        if missing:
            kind = "an AsyncDBChatStore (SQLAlchemyChatStore)" if self.db else "a BaseChatStore"
            raise StoreShapeError(f"the {self.label} returned {opener!r}, which has no {', '.join(missing)}: "
                                  f"{kind} has {', '.join(methods)}")
        if self.db and any(inspect.iscoroutinefunction(getattr(opener, m)) is False for m in methods):
            raise StoreShapeError(f"the {self.label} returned {opener!r}, whose methods are not all async: "
                                  "llama_index_db_chat_stores() is for an AsyncDBChatStore; a BaseChatStore goes "
                                  "through llama_index_chat_stores()")

    def _history(self, opener: Any) -> ItemHistory:
        return (DBChatStore if self.db else ChatStore)(opener, self.label, self.asynchronous, self.db)

    async def _handle(self, fixtures: dict[str, Any]) -> AsyncIterator[ItemHistory]:
        async for handle in super()._handle(fixtures):
            if self.neighbour is None:
                yield handle
                continue
            closers: list[Any] = []
            resources: list[Any] = []
            token = _OWNED.set(resources)  # the neighbour may hand its engine to owned() too
            try:
                try:
                    handle.neighbour = await enter_factory(  # type: ignore[attr-defined]
                        "neighbour", self.neighbour, {n: fixtures[n] for n in parameter_names(self.neighbour)}, closers)
                finally:
                    _OWNED.reset(token)
                yield handle
            finally:
                await run_all([*(functools.partial(close_resource, r) for r in reversed(resources)),
                               *(functools.partial(close_factory, c) for _, c in reversed(closers))])

    def __repr__(self) -> str:
        return f"{'llama_index_db_chat_stores' if self.db else 'llama_index_chat_stores'}" \
               f"({self.__module__}:{self.__qualname__})"


def llama_index_chat_stores(factory: Callable[..., Any], *, asynchronous: bool = False,
                            neighbour: Callable[..., Any] | None = None) -> ChatStores:
    """Bind a LlamaIndex ``BaseChatStore`` (``SimpleChatStore``, ``RedisChatStore``,
    ``PostgresChatStore``...) for :func:`~storetest.run_conformance`,
    :func:`storetest.check` and ``storetest check``.

    :param factory: the outer factory: its parameters are fixtures; it returns the store
        (handing what must be closed to :func:`storetest.owned`). Called twice with the
        same fixtures, it must give two handles on one backend.
    :param asynchronous: await the async twins (``aget_messages``, ``async_add_message``,
        ...) instead of calling the plain methods from threads.
    :param neighbour: an outer factory of the same fixtures returning another
        application's store on the same backend; ``get_keys`` must not list its keys.
    :raises TypeError: ``factory`` or ``neighbour`` is not callable.
    :raises ImportError: llama-index-core is not installed (``storetest[llama-index]``).
    """
    llama_types()
    return ChatStores(factory, asynchronous=asynchronous, neighbour=neighbour)


def llama_index_db_chat_stores(factory: Callable[..., Any], *,
                               neighbour: Callable[..., Any] | None = None) -> ChatStores:
    """Bind a LlamaIndex ``AsyncDBChatStore`` (``SQLAlchemyChatStore``), async only, as
    :func:`llama_index_chat_stores` does a ``BaseChatStore``; its ``count_messages``,
    ``delete_oldest_messages`` and ``archive_oldest_messages`` are judged too.

    :raises TypeError: ``factory`` or ``neighbour`` is not callable.
    :raises ImportError: llama-index-core is not installed (``storetest[llama-index]``).
    """
    llama_types()
    return ChatStores(factory, db=True, neighbour=neighbour)


def llama_status() -> Any:
    """``MessageStatus`` of llama-index-core's ``AsyncDBChatStore``."""
    from llama_index.core.storage.chat_store.base_db import MessageStatus

    return MessageStatus


def _item_or_none(got: object) -> Item | None:
    return None if got is None else to_item(got)


def _sync_binding(factory: Callable[..., Any]) -> ChatStores:
    return ChatStores(factory)


def _async_binding(factory: Callable[..., Any]) -> ChatStores:
    return ChatStores(factory, asynchronous=True)


def _db_binding(factory: Callable[..., Any]) -> ChatStores:
    return ChatStores(factory, db=True)


_SPAWN: Final = {(False, False): _sync_binding, (True, False): _async_binding, (False, True): _db_binding}
