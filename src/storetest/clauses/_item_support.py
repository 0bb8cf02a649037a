"""What the item-history clause modules share: items that name themselves, reads that
record what the store raised, and the comparison that reports a difference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from storetest._engine import strategies
from storetest._engine.failures import RAISED, Check
from storetest._engine.harness import Handle, Target
from storetest._engine.item_diagnosis import describe_items
from storetest._engine.item_protocol import ItemProtocol
from storetest.items import Item, same_items

__all__ = ["ITEMS", "NEEDS", "ItemProtocol", "expect", "labelled", "protocol", "read", "texts_of"]

NEEDS = ("items",)


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
           short: bool = False, elsewhere: Mapping[str, Sequence[Item]] | None = None,
           expected: bool = False, batches: Sequence[int] = ()) -> bool:
    """Record a violation unless ``got`` is exactly ``sent`` (type for type); ``short``
    shows the items' texts instead of the items (both the same way); ``elsewhere`` is
    what other sessions hold, or this one held before (see :func:`describe_items`);
    ``expected``: ``sent`` is what the read should give, not what was just added (a
    model's, what is left after a pop), and is labelled so; ``batches``: the sizes of the
    ``add_items`` calls ``sent`` was added in (lost items are placed among them)."""
    if got is RAISED:
        return False
    if same_items(list(sent), got):
        return True
    one, two = (texts_of(list(sent)), texts_of(got)) if short else (list(sent), got)
    check.differs(session, what + describe_items(sent, got, elsewhere, batches), one, two, expected)
    return False
