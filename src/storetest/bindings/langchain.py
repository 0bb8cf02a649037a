"""The binding for a LangChain chat history (``BaseChatMessageHistory``), in one line::

    run_conformance(chat_histories(lambda tmp_path: lambda id: SQLChatMessageHistory(
        id, connection=f"sqlite:///{tmp_path}/chat.db")))

The same shape as :func:`storetest.item_sessions`: an outer factory (fixtures in) returns
an opener, ``session_id -> history``; called twice with the same fixtures it gives the
second handle the replica clauses use. A sync history is driven through ``messages``,
``add_messages`` and ``clear`` from threads, an async one (``asynchronous=True``) through
``aget_messages``, ``aadd_messages`` and ``aclear`` on the event loop. The item-history
clauses run on it with LangChain's own messages (:mod:`storetest.bindings._langchain_messages`), except
those of ``pop_item`` and ``get_items(limit)``, which the protocol does not have.

LangChain documents ``add_messages`` as a bulk add "to avoid unnecessary round-trips", not
as one atomic write; the clauses that need it atomic (a reader never sees part of a batch,
concurrent batches never interleave) and the one that needs returned messages to be the
caller's still fail, their verdicts beginning "beyond the protocol's promise".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

from storetest._engine import races
from storetest._engine.harness import StoreShapeError, code_roots
from storetest.bindings._langchain_messages import chat_protocol, langchain, to_item, to_message
from storetest.bindings.openai_agents import ItemHistory, ItemSessions
from storetest.items import Item

__all__ = ["ChatHistories", "ChatHistory", "chat_histories"]

T = TypeVar("T")

SYNC_METHODS: Final = ("add_messages", "clear")
ASYNC_METHODS: Final = ("aget_messages", "aadd_messages", "aclear")

#: The clauses of what a chat history does not have, and why they are skipped.
NOT_IN_THE_PROTOCOL: Final = {
    name: f"not in LangChain's protocol: BaseChatMessageHistory has no {what}"
    for name, what in (("pop_item_takes_the_newest", "pop"), ("pop_item_hands_each_item_out_once", "pop"),
                       ("get_items_gives_the_latest", "limit on messages"))
}
#: Clauses asking more than LangChain documents, and what it documents instead.
BEYOND_THE_PROTOCOL: Final = {
    **{name: "LangChain documents add_messages as a bulk add for efficiency, not as one atomic write; "
       "replicas sharing a history need it atomic"
       for name in ("a_batch_is_atomic_to_readers", "concurrent_batches_never_interleave")},
    "items_are_not_aliased": "LangChain does not document whether messages returns a copy; a caller "
    "that changes what it got changes a history that shares its list",
}
NO_SESSION_IDS: Final = "not applicable: the store has no session ids"


class ChatHistory(ItemHistory):
    """One handle on a chat-history backend, as the item clauses drive it: items in,
    LangChain messages to the history, items out (:mod:`storetest.bindings._langchain_messages`)."""

    def __init__(self, opener: Callable[[str], Any], label: str, asynchronous: bool, id_limit: str,
                 kinds: set[type] | None = None) -> None:
        super().__init__(opener, label)
        self.asynchronous = asynchronous
        self.storetest_threaded = not asynchronous  # its calls run on threads (in_thread)
        #: The classes of the histories every handle of this binding opened: their code is
        #: the store's (a fresh handle's constructor race traces it before it has a history).
        self.kinds = set() if kinds is None else kinds
        self._opening = threading.Lock()
        self.storetest_protocol = chat_protocol()
        self.storetest_id_limit = id_limit
        #: The history's own method names, for messages (the clauses call the item protocol's).
        self.storetest_names = ({"get_items": "aget_messages", "add_items": "aadd_messages", "clear_session": "aclear"}
                                if asynchronous else
                                {"get_items": "messages", "add_items": "add_messages", "clear_session": "clear"})
        #: The messages last passed to add_messages and last returned, per session (for
        #: the aliasing clause: a caller holds those, not the items).
        self.passed: dict[str, list[Any]] = {}
        self.returned: dict[str, object] = {}

    def session(self, session_id: str) -> Any:
        """The history for ``session_id`` on this handle, opened on first use.

        :raises StoreShapeError: (a TypeError) the opener returned something that is not a chat history.
        """
        with self._opening:  # a sync history is opened on a thread: one per id and handle
            return self._open(session_id)

    def _open(self, session_id: str) -> Any:
        if session_id in self._sessions:
            return self._sessions[session_id]
        opened = self._opener(session_id)
        self.kinds.add(type(opened))
        methods = ASYNC_METHODS if self.asynchronous else SYNC_METHODS
        missing = [m for m in methods if not callable(getattr(opened, m, None))]
        if missing or not _has_messages(opened):
            raise StoreShapeError(f"the {self._label}'s opener returned {opened!r} for session {session_id!r}, which "
                            f"has no {', '.join(missing or ['messages'])}: a LangChain chat history has "
                            f"messages, {', '.join(methods)} (BaseChatMessageHistory)")
        self._sessions[session_id] = opened
        return opened

    async def get_items(self, session_id: str, limit: int | None = None) -> list[Item]:
        if limit is not None:
            raise TypeError("a LangChain chat history has no limit on messages")
        got = await self.session(session_id).aget_messages() if self.asynchronous else await self._threaded(
            lambda: self.session(session_id).messages)
        self.returned[session_id] = got
        return [to_item(m) for m in got] if isinstance(got, list) else got

    async def add_items(self, session_id: str, items: list[Item]) -> None:
        messages = [to_message(i) for i in items]
        self.passed[session_id] = messages
        if self.asynchronous:
            await self.session(session_id).aadd_messages(messages)
        else:
            await self._threaded(lambda: self.session(session_id).add_messages(messages))

    async def pop_item(self, session_id: str) -> Item | None:
        raise TypeError("a LangChain chat history has no pop (its pop clauses are skipped)")

    async def clear_session(self, session_id: str) -> None:
        if self.asynchronous:
            await self.session(session_id).aclear()
        else:
            await self._threaded(lambda: self.session(session_id).clear())

    async def open_session(self, session_id: str) -> None:
        """Construct the history for ``session_id`` and nothing more (a sync one on a
        thread, as its calls are): what the constructor race of a fresh backend races."""
        if self.asynchronous:
            self.session(session_id)
        else:
            await self._threaded(lambda: self.session(session_id))

    async def _threaded(self, call: Callable[[], T]) -> T:
        """A sync history's call, its constructor included, on a thread (raced line by
        line in a race of plain calls: :func:`storetest._engine.races.threaded`)."""
        return await races.threaded(call, code_roots(self) if races.in_plain_race() else ())

    def storetest_code(self) -> list[Any]:
        return [*super().storetest_code(), *self.kinds]

    def __repr__(self) -> str:
        return f"<chat history from the {self._label}: {len(self._sessions)} history(ies) open>"


class ChatHistories(ItemSessions):
    """A store factory made of an outer factory (see :func:`chat_histories`)."""

    def __init__(self, factory: Callable[..., Any], label: str = "factory", *, asynchronous: bool = False,
                 session_ids: bool | str = True) -> None:
        if not callable(factory):
            raise TypeError(
                f"chat_histories() takes the outer factory (fixtures in, an opener out), not "
                f"{type(factory).__name__}; e.g. chat_histories(lambda tmp_path: lambda id: "
                "FileChatMessageHistory(tmp_path / f'{id}.json'))")
        if not isinstance(session_ids, (bool, str)) or session_ids == "":
            raise TypeError("session_ids is True (the store keeps ids apart), False (it has none: one object or "
                            "file is one history) or a sentence saying how the opener maps ids")
        super().__init__(factory, label)
        self.asynchronous = asynchronous
        self.session_ids = session_ids
        self.kinds: set[type] = set()
        self.storetest_spawn = (factory, _async_binding if asynchronous else _sync_binding)
        self.storetest_skip = {**NOT_IN_THE_PROTOCOL, **(
            {} if session_ids is not False else {"item_sessions_are_isolated": NO_SESSION_IDS})}
        self.storetest_beyond = BEYOND_THE_PROTOCOL
        if label == "factory":
            self.storetest_replica = ChatHistories(factory, "replica", asynchronous=asynchronous,
                                                   session_ids=session_ids)
            self.storetest_replica.kinds = self.kinds

    def _history(self, opener: Callable[[str], Any]) -> ItemHistory:
        return ChatHistory(opener, self.label, self.asynchronous,
                           self.session_ids if isinstance(self.session_ids, str) else "", self.kinds)

    def __repr__(self) -> str:
        return f"chat_histories({self.__module__}:{self.__qualname__})"


def chat_histories(factory: Callable[..., Any], *, asynchronous: bool = False,
                   session_ids: bool | str = True) -> ChatHistories:
    """Bind a LangChain chat history for :func:`~storetest.run_conformance`,
    :func:`storetest.check` and ``storetest check``.

    :param factory: the outer factory, as for :func:`storetest.item_sessions`: its
        parameters are fixtures; it sets up one handle (an engine, a client, a
        directory), hands what must be closed to :func:`storetest.owned`, and returns an
        opener, ``session_id -> history``.
    :param asynchronous: drive ``aget_messages``, ``aadd_messages`` and ``aclear`` on
        the event loop (an ``AsyncEngine``, an async connection) instead of
        ``messages``, ``add_messages`` and ``clear`` from threads.
    :param session_ids: ``True``: the store keeps histories apart by id, and the
        isolation clause judges it; ``False``: it has no ids (one object or one file is
        one history, the opener's own mapping), and that clause is not applicable; a
        sentence: the opener maps ids (to UUIDs, say), a limit the report lists.
    :raises TypeError: ``factory`` is not callable, or ``session_ids`` is neither.
    :raises ImportError: langchain-core is not installed (``storetest[langchain]``).
    """
    langchain()
    return ChatHistories(factory, asynchronous=asynchronous, session_ids=session_ids)


def _has_messages(history: object) -> bool:
    # Without reading it: a property may do I/O (or, on an async history, refuse to).
    cls = type(history)
    return any("messages" in vars(k) for k in cls.__mro__) or "messages" in getattr(cls, "model_fields", {})


def _sync_binding(factory: Callable[..., Any]) -> ChatHistories:
    return ChatHistories(factory)


def _async_binding(factory: Callable[..., Any]) -> ChatHistories:
    return ChatHistories(factory, asynchronous=True)
