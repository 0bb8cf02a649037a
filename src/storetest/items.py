"""The item-history contract: the shape of an agent SDK's session, as the OpenAI Agents
SDK's ``Session`` has it (standard library only; storetest never imports the SDK).

One object is one conversation, bound to its ``session_id``:

- ``get_items(limit=None)``: every item in the order added, or the latest ``limit``
  of them, still oldest first; ``get_items(0)`` is ``[]``. A session never used is
  ``[]``, not an error. (Negative limits are not part of the protocol.)
- ``add_items(items)``: append a batch, in order, as one write.
- ``pop_item()``: remove and return the newest item, ``None`` when there is none;
  each item is popped by exactly one caller, across every handle on the backend.
- ``clear_session()``: remove every item.

Items are JSON values: dicts of strings, numbers, booleans, ``None``, lists and dicts
(the SDK's ``TResponseInputItem``: messages, ``function_call`` whose ``arguments`` is
raw JSON *text*, ``function_call_output``, reasoning items, and types the SDK does not
know). What is added comes back equal type for type: ``1``, ``1.0`` and ``True`` are
three values, strings are kept character for character, the order of a dict's keys is
not part of the promise (:func:`same_value`).

The protocol says nothing about session ids. Two ids sharing items is a failure; an id
the backend cannot hold, refused with an exception before anything is written and with
the handle still usable afterwards, is a *limit* of the store, listed in the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol, TypeAlias, runtime_checkable

__all__ = [
    "ITEM_METHODS",
    "Item",
    "ItemSession",
    "JSONValue",
    "SessionOpener",
    "first_difference",
    "same_items",
    "same_value",
]

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
Item: TypeAlias = "dict[str, JSONValue]"

#: The protocol's methods; an object with all four is a session, whatever its class.
ITEM_METHODS: Final = ("get_items", "add_items", "pop_item", "clear_session")


@runtime_checkable
class ItemSession(Protocol):
    """One conversation's item history (``agents.memory.session.SessionABC``'s shape)."""

    session_id: str

    async def get_items(self, limit: int | None = None) -> list[Item]:
        """Every item, oldest first, or the latest ``limit``."""

    async def add_items(self, items: list[Item]) -> None:
        """Append ``items`` in order, as one write."""

    async def pop_item(self) -> Item | None:
        """Remove and return the newest item; ``None`` when empty."""

    async def clear_session(self) -> None:
        """Remove every item."""


#: What an author hands storetest: a session id in, that conversation's session out.
SessionOpener: TypeAlias = Callable[[str], ItemSession]


def same_value(sent: object, got: object) -> bool:
    """Whether ``got`` is ``sent`` as JSON with types kept: the same Python type at every
    level (``True``, ``1`` and ``1.0`` differ; a list is not a tuple), strings equal,
    dicts with the same keys in any order."""
    return first_difference(sent, got) is None


def same_items(sent: list[Item], got: object) -> bool:
    """Whether ``got`` is a list holding exactly ``sent``, item for item (:func:`same_value`)."""
    return same_value(sent, got)


def first_difference(sent: object, got: object, path: str = "") -> tuple[str, object, object] | None:
    """Where ``got`` first differs from ``sent`` (type-strict, as :func:`same_value`):
    ``(path, sent_there, got_there)`` with a path like ``[2].content[0].text``, or
    ``None`` when they are the same."""
    if type(sent) is not type(got):
        return path, sent, got
    if isinstance(sent, dict):
        assert isinstance(got, dict)
        for key in sent:
            if key not in got:
                return f"{path}.{key}", sent[key], _MISSING
        for key in got:
            if key not in sent:
                return f"{path}.{key}", _MISSING, got[key]
        for key, value in sent.items():
            found = first_difference(value, got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(sent, list):
        assert isinstance(got, list)
        for i, (a, b) in enumerate(zip(sent, got, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(sent) != len(got):
            return f"{path}[{min(len(sent), len(got))}]", *(
                (sent[len(got)], _MISSING) if len(sent) > len(got) else (_MISSING, got[len(sent)]))
        return None
    if isinstance(sent, float) and sent != sent:  # NaN is not JSON; compare it as itself
        return None if got != got else (path, sent, got)
    return None if sent == got else (path, sent, got)


class _Missing:
    def __repr__(self) -> str:
        return "(nothing)"


#: Stands for a key or item absent on one side in :func:`first_difference`.
_MISSING: Final = _Missing()
MISSING: Final = _MISSING
