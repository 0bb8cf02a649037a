"""What the item-history clause modules share: items that name themselves, reads that
record what the store raised, and the comparison that reports a difference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from storetest import strategies
from storetest._harness import Handle, Target
from storetest.failures import RAISED, Check
from storetest.item_diagnosis import describe_items
from storetest.items import Item, same_items

__all__ = ["ITEMS", "NEEDS", "ItemProtocol", "expect", "labelled", "protocol", "read", "texts_of"]

NEEDS = ("items",)


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
    binding of another shape (a LangChain chat history: ``storetest.chat_messages``)
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
    #: ``pop_item`` and ``get_items(limit)`` are part of the protocol.
    pops: bool = True
    limits: bool = True
    #: Change what a caller passed to ``add_items`` or got back (``after`` says which),
    #: through ``history``, the binding's handle, which knows the values behind the items.
    tamper: Callable[[object, str, object, str], None] = _tamper


def _agents_items() -> ItemProtocol:
    return ItemProtocol(
        corpus=strategies.ITEM_CORPUS, nul=strategies.NUL_ITEMS, batches=strategies.item_batches,
        model_batches=strategies.model_item_batches,
        with_arguments=lambda raw: {"type": "function_call", "call_id": "c", "name": "f", "arguments": raw})


ITEMS: ItemProtocol = _agents_items()


def protocol(t: Target) -> ItemProtocol:
    """The protocol of the store under test: its handle's, else :data:`ITEMS`."""
    found = getattr(t.store.raw, "storetest_protocol", None)
    return found if isinstance(found, ItemProtocol) else ITEMS


def labelled(label: str, n: int, start: int = 0) -> list[Item]:
    """``n`` user messages whose text is ``label #i``: each names its batch and place."""
    return [{"role": "user", "content": f"{label} #{i}"} for i in range(start, start + n)]


def texts_of(items: object) -> list[object]:
    """The ``content`` of each item (what :func:`labelled` wrote), for short messages."""
    if not isinstance(items, list):
        return [items]
    # A value the binding could not write as a plain item keeps its text under "data".
    return [(i.get("content", i.get("data", {}).get("content") if isinstance(i.get("data"), dict) else None)
             if isinstance(i, dict) else i) for i in items]


def read(check: Check, t: Target, session: str, handle: Handle | None = None,
         limit: int | None = None) -> Any:
    """``get_items`` through ``handle`` (default: the store), :data:`RAISED` if it raised."""
    h = handle or t.store
    what = "get_items()" if limit is None else f"get_items({limit})"
    return check.call(session, f"{what} through the {h.label}", h.call("get_items", session, limit))


def expect(check: Check, session: str, sent: Sequence[Item], got: object, what: str = "",
           short: bool = False) -> bool:
    """Record a violation unless ``got`` is exactly ``sent`` (type for type); ``short``
    shows the items' texts instead of the items."""
    if got is RAISED:
        return False
    if same_items(list(sent), got):
        return True
    shown = (texts_of(list(sent)), texts_of(got)) if short else (list(sent), got)
    check.add(session, what + describe_items(sent, got), *shown)
    return False
