"""What the item-history clause modules share: items that name themselves, reads that
record what the store raised, and the comparison that reports a difference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storetest._harness import Handle, Target
from storetest.failures import RAISED, Check
from storetest.item_diagnosis import describe_items
from storetest.items import Item, same_items

__all__ = ["NEEDS", "expect", "labelled", "read", "texts_of"]

NEEDS = ("items",)


def labelled(label: str, n: int, start: int = 0) -> list[Item]:
    """``n`` user messages whose text is ``label #i``: each names its batch and place."""
    return [{"role": "user", "content": f"{label} #{i}"} for i in range(start, start + n)]


def texts_of(items: object) -> list[object]:
    """The ``content`` of each item (what :func:`labelled` wrote), for short messages."""
    if not isinstance(items, list):
        return [items]
    return [i.get("content") if isinstance(i, dict) else i for i in items]


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
