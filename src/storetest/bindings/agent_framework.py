"""The binding for a Microsoft Agent Framework ``HistoryProvider``, in one line::

    run_conformance(history_providers(lambda tmp_path: FileHistoryProvider(tmp_path)))

:func:`history_providers` takes an *outer factory*: its parameters are fixtures
(``tmp_path``, ``storetest_redis_url``...) and it returns one provider on a backend.
The binding calls it once per handle (twice in a replica clause, with the same fixtures,
so both providers reach one backend) and drives the provider's two methods,
``save_messages(session_id, messages, *, state=...)`` and ``get_messages(session_id, *,
state=...)``, with the framework's own ``Message`` values
(:mod:`storetest.bindings._agent_framework_messages`). ``state`` is the session's state
as an ``AgentSession`` would pass it: one dict per provider object and session id (a
provider that keeps its history there, ``InMemoryHistoryProvider``, keeps it in one
process; an outer factory returning one provider per directory shares it between
handles). What the factory hands to :func:`storetest.owned` is closed after; so is the
provider, if it has ``aclose()`` or ``close()``.

The item-history clauses run on it, except those of ``pop_item``, ``get_items(limit)``
and ``clear_session``, which the protocol does not have. The framework documents
``save_messages`` as "persist messages", not as one atomic write, and says nothing of
whether ``get_messages`` returns copies: the clauses needing either still fail, their
verdicts beginning "beyond the protocol's promise". The whole-session ``SessionStore``
has its own binding, :func:`storetest.session_stores`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Final

from storetest._engine.harness import StoreShapeError
from storetest.bindings._agent_framework_messages import agent_framework, messages_protocol, to_item, to_message
from storetest.bindings._support import close_resource
from storetest.bindings.openai_agents import ItemHistory, ItemSessions
from storetest.items import Item

__all__ = ["HistoryProviderHandle", "HistoryProviders", "history_providers"]

PROVIDER_METHODS: Final = ("get_messages", "save_messages")

#: The clauses of what a history provider does not have, and why they are skipped.
NOT_IN_THE_PROTOCOL: Final = {
    name: f"not in Agent Framework's protocol: HistoryProvider has no {what}"
    for name, what in (("pop_item_takes_the_newest", "pop"), ("pop_item_hands_each_item_out_once", "pop"),
                       ("get_items_gives_the_latest", "limit on get_messages"),
                       ("clear_session_empties_it", "clear"), ("clear_racing_add_lands_before_or_after", "clear"))
}
#: Clauses asking more than the framework documents, and what it documents instead.
BEYOND_THE_PROTOCOL: Final = {
    **{name: "Agent Framework documents save_messages as persisting messages, not as one atomic write; "
       "providers sharing a backend need it atomic"
       for name in ("a_batch_is_atomic_to_readers", "concurrent_batches_never_interleave")},
    "items_are_not_aliased": "Agent Framework does not document whether get_messages returns copies; a "
    "caller that changes a message it got changes a history that keeps the same objects",
}


class HistoryProviderHandle(ItemHistory):
    """One provider, as the item clauses drive it: items in, the framework's messages
    to the provider, items out."""

    def __init__(self, provider: Any, label: str) -> None:
        super().__init__(lambda session_id: provider, label)
        self.provider = provider
        self.storetest_protocol = messages_protocol()
        self.storetest_names = {"get_items": "get_messages", "add_items": "save_messages"}
        #: Each session's state dict, as an AgentSession passes it to its providers: one
        #: per provider object and session id (two handles on one provider share them).
        self.states = _states_of(provider)
        #: The messages last passed to save_messages and last returned, per session (for
        #: the aliasing clause: a caller holds those, not the items).
        self.passed: dict[str, list[Any]] = {}
        self.returned: dict[str, object] = {}

    def session(self, session_id: str) -> Any:
        """The provider (the same for every session); its state for ``session_id`` is made here."""
        self.states.setdefault(session_id, {})
        return self.provider

    def storetest_code(self) -> list[Any]:
        return [self.provider]

    async def get_items(self, session_id: str, limit: int | None = None) -> list[Item]:
        if limit is not None:
            raise TypeError("a history provider has no limit on get_messages")
        got = await self.session(session_id).get_messages(session_id, state=self.states[session_id])
        self.returned[session_id] = got
        return [to_item(m) for m in got] if isinstance(got, list) else got

    async def add_items(self, session_id: str, items: list[Item]) -> None:
        messages = [to_message(i) for i in items]
        self.passed[session_id] = messages
        await self.session(session_id).save_messages(session_id, messages, state=self.states[session_id])

    async def pop_item(self, session_id: str) -> Item | None:
        raise TypeError("a history provider has no pop (its pop clauses are skipped)")

    async def clear_session(self, session_id: str) -> None:
        raise TypeError("a history provider has no clear (its clear clauses are skipped)")

    async def aclose(self) -> None:
        if any(callable(getattr(self.provider, m, None)) for m in ("aclose", "close")):
            await close_resource(self.provider)

    def __repr__(self) -> str:
        return f"<{type(self.provider).__name__} from the {self._label}: {len(self.states)} session(s) used>"


_STATES: weakref.WeakKeyDictionary[Any, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def _states_of(provider: Any) -> dict[str, dict[str, Any]]:
    try:
        return _STATES.setdefault(provider, {})
    except TypeError:  # not weakly referenceable: the handle's own
        return {}


class HistoryProviders(ItemSessions):
    """A store factory made of an outer factory (see :func:`history_providers`)."""

    def __init__(self, factory: Callable[..., Any], label: str = "factory") -> None:
        if not callable(factory):
            raise TypeError(
                f"history_providers() takes the outer factory (fixtures in, a provider out), not "
                f"{type(factory).__name__}; e.g. history_providers(lambda tmp_path: FileHistoryProvider(tmp_path))")
        super().__init__(factory, label)
        self.storetest_spawn = (factory, history_providers)
        self.storetest_skip = dict(NOT_IN_THE_PROTOCOL)
        self.storetest_beyond = BEYOND_THE_PROTOCOL
        if label == "factory":
            self.storetest_replica = HistoryProviders(factory, "replica")

    def _refuse_unless_opener(self, made: object) -> None:
        missing = [m for m in PROVIDER_METHODS if not callable(getattr(made, m, None))]
        if missing:
            raise StoreShapeError(
                f"the history_providers {self.label} returned {made!r}, which has no {', '.join(missing)}: it must "
                "return a HistoryProvider (get_messages and save_messages), e.g. history_providers(lambda "
                "tmp_path: FileHistoryProvider(tmp_path))")

    def _history(self, opener: Any) -> ItemHistory:
        return HistoryProviderHandle(opener, self.label)

    def __repr__(self) -> str:
        return f"history_providers({self.__module__}:{self.__qualname__})"


def history_providers(factory: Callable[..., Any]) -> HistoryProviders:
    """Bind a Microsoft Agent Framework ``HistoryProvider`` for
    :func:`~storetest.run_conformance`, :func:`storetest.check` and ``storetest check``.

    :param factory: the outer factory: a plain or async function, or a (async)
        generator that tears down after its ``yield``; its parameters are fixtures. It
        returns one provider on a backend (a directory, a Redis URL); called twice with
        the same fixtures it must give two providers on one backend (the replica and
        process clauses use the second).
    :raises TypeError: ``factory`` is not callable.
    :raises ImportError: agent-framework-core is not installed (``storetest[agent-framework]``).
    """
    agent_framework()
    return HistoryProviders(factory)
