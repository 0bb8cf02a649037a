"""What the item clauses send a binding's sessions: the values of one item protocol.

A binding of another shape than the OpenAI Agents items (a LangChain chat history)
describes its values here, below the clauses, so that the binding need not import them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from storetest.items import Item

__all__ = ["ItemProtocol"]


def _tamper(history: object, session: str, value: object, after: str) -> None:
    """What a caller might do to what it passed or got back: change the first item, add one."""
    changed = f"changed by the caller after {after}"
    if isinstance(value, dict):
        value["content"] = changed
    elif isinstance(value, list):
        if value and isinstance(value[0], dict):
            value[0]["content"] = changed
        value.append({"role": "user", "content": f"appended by the caller after {after}"})


@dataclass(frozen=True)
class ItemProtocol:
    """What the item clauses send a binding's sessions and may ask of them. An item
    history (:data:`ITEMS`, the OpenAI Agents SDK's shape) has every field's default; a
    binding of another shape (a LangChain chat history: ``storetest.bindings._langchain_messages``)
    hands its own as its handle's ``storetest_protocol``. Items are dicts either way;
    the shape's binding maps them to its values."""

    #: Every value shape the round-trip clause adds, no NUL anywhere.
    corpus: Sequence[Item]
    #: NUL where the values allow it, one value a session.
    nul: Sequence[Item]
    #: Hypothesis strategies: one ``add_items`` batch, and the state machine's cheap batches.
    batches: Any
    model_batches: Any
    #: An item carrying ``arguments``, raw JSON text, that must come back byte for byte.
    with_arguments: Callable[[str], Item]
    #: ``pop_item``, ``get_items(limit)`` and ``clear_session`` are part of the protocol.
    pops: bool = True
    limits: bool = True
    clears: bool = True
    #: ``add_items`` is one write: a reader or another writer sees the batch whole or not
    #: at all. ``False`` for a protocol that adds one message at a time (a LlamaIndex
    #: chat store's ``add_message``): the race clauses then ask each message to land
    #: whole and once, in order, not each batch.
    atomic_batches: bool = True
    #: Change what a caller passed to ``add_items`` or got back (``after`` says which),
    #: through ``history``, the binding's handle, which knows the values behind the items.
    tamper: Callable[[object, str, object, str], None] = _tamper
