"""Name what an item history did to its items (a number's type changed, raw arguments
re-encoded, the oldest items returned for a limit, two ids' keys colliding), in words a
store author can act on. Every function returns one line and never raises; text is
described by :func:`storetest._engine.diagnosis.describe_text`, as for transcripts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from storetest._engine.diagnosis import describe_id_merge, describe_text, shorten
from storetest.items import MISSING, first_difference

__all__ = ["describe_item", "describe_item_id_merge", "describe_items", "describe_limit"]


def describe_item(sent: object, got: object) -> str:
    """What happened to one item (compared type for type)."""
    found = first_difference(sent, got)
    if found is None:
        return "unchanged"
    path, a, b = found
    where = f"at {path}" if path else "the item"
    if b is MISSING:
        return f"{where}: the key was dropped (it held {shorten(a, 60)})"
    if a is MISSING:
        return f"{where}: a key that was never added came back ({shorten(b, 60)})"
    if isinstance(a, str) and isinstance(b, str):
        return f"{where}: {describe_text(a, b)}"
    if isinstance(a, bool) and isinstance(b, (int, float)):
        return f"{where}: {a!r} came back as {b!r}, a number (a boolean stored as a number)"
    if isinstance(a, int) and not isinstance(a, bool) and isinstance(b, float):
        lost = " and lost precision" if float(a) != a or int(b) != a else ""
        return (f"{where}: the integer {shorten(a, 40)} came back as the float {b!r}{lost}: the value went "
                "through a double (JavaScript, a DOUBLE column, a JSON parser's default)")
    if isinstance(a, float) and isinstance(b, int) and not isinstance(b, bool):
        return (f"{where}: the float {a!r} came back as the integer {b!r}: numbers were re-encoded "
                "(a jsonb or JSON column, or a codec that drops '.0')")
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return f"{where}: the integer {shorten(a, 40)} came back as {shorten(b, 40)} (precision lost past 2^53?)"
    if isinstance(a, list) and isinstance(b, tuple):
        return f"{where}: a list came back as a tuple"
    if isinstance(a, str):
        return f"{where}: {describe_text(a, b)}"  # type: ignore[arg-type]
    return f"{where}: {shorten(a, 60)} came back as {type(b).__name__} {shorten(b, 60)}"


def describe_items(sent: Sequence[object], got: object, elsewhere: Mapping[str, Sequence[object]] | None = None) -> str:
    """What happened to a history: items lost, duplicated, reordered, or one changed.

    :param elsewhere: what the caller knows beyond ``sent``: items held by other
        sessions, or once held by this one (``{"session 'x'": [...], "this session before
        its clear": [...]}``), so items that should not be there are said to come from
        there, not called never added.
    """
    if not isinstance(got, list):
        return f"get_items() returned {type(got).__name__}, not a list"
    sent = list(sent)
    if len(got) == len(sent):
        changed = [i for i, (a, b) in enumerate(zip(sent, got, strict=True)) if first_difference(a, b)]
        if changed and _same_multiset(sent, got):
            if _keys(got) == _keys(sent)[::-1]:
                return "items came back newest first (the protocol's order is oldest first)"
            return "items came back in a different order than they were added"
        if changed:
            i = changed[0]
            return f"item {i} changed: {describe_item(sent[i], got[i])}"
        return "unchanged"
    if len(got) < len(sent):
        n = len(sent) - len(got)
        unique = list(dict.fromkeys(_keys(sent)))
        if len(unique) < len(sent) and _keys(got) == unique:
            return (f"identical items deduplicated: {len(sent)} added, {len(got)} came back, each repeat dropped "
                    "(a unique constraint on content, or a set); a history keeps an item added twice, twice")
        if _keys(got) == _keys(sent)[: len(got)]:
            return f"the last {n} item(s) were lost"
        if _keys(got) == _keys(sent)[n:]:
            return f"the first {n} item(s) were lost"
        return f"{n} item(s) lost of {len(sent)}"
    extra = [k for k in _keys(got) if k not in set(_keys(sent))]
    if not extra:
        return f"{len(got) - len(sent)} item(s) came back twice"
    for where, items in (elsewhere or {}).items():
        if set(extra) <= set(_keys(items)):
            return f"{len(extra)} item(s) came back that belong to {where}, not to what this session holds now"
    return f"{len(extra)} item(s) that were never added came back"


def describe_limit(stored: Sequence[object], limit: int, got: object) -> str:
    """What ``get_items(limit)`` returned instead of the latest ``limit`` items, oldest first."""
    if isinstance(got, list) and limit:
        keys, want = _keys(got), _keys(list(stored))
        if keys == want[:limit] and len(stored) > limit:
            return f"get_items({limit}) returned the oldest {limit} items, not the latest"
        if keys == want[-limit:][::-1] and limit > 1:
            return (f"get_items({limit}) returned the latest {limit} items newest first; the protocol "
                    "returns them in chronological order (reverse the rows read with ORDER BY ... DESC)")
        if len(keys) > limit and keys == want[-len(keys):]:
            return (f"get_items({limit}) returned the latest {len(keys)} items: more than the limit")
    if isinstance(got, list) and limit == 0 and stored and _keys(got) == _keys(list(stored)):
        return ("get_items(0) returned every item: LIMIT 0 read as no limit (`if limit:` treats 0 like None); "
                "the protocol returns no items for limit 0")
    want_items = list(stored)[-limit:] if limit else []
    return f"get_items({limit}): " + describe_items(want_items, got, {"this session, beyond the limit": stored})


def describe_item_id_merge(one: str, other: str) -> str:
    """Why two distinct session ids shared items, key schemes first."""
    for a, b in ((one, other), (other, one)):
        if b.startswith(a + ":"):
            return (f"session ids collide in the key scheme: {b!r} and {a!r} share keys (keys built as "
                    "'<prefix>:<id>' and '<prefix>:<id>:<suffix>'); escape or length-prefix the id")
    if any(c in one + other for c in "*?[]"):
        return ("an id with glob characters (* ? [ ]) matched another session's keys (a KEYS/SCAN or "
                "fnmatch pattern built from the id without escaping)")
    if any(c in one + other for c in "{}"):
        return "ids with braces shared keys (a hash tag or format string built from the id)"
    return describe_id_merge(one, other)


def _keys(values: Sequence[object]) -> list[str]:
    # One comparable text per item: types kept apart (1, 1.0, True), dict key order not.
    return [repr(_canonical(v)) for v in values]


def _canonical(value: object) -> object:
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", [_canonical(v) for v in value])
    return (type(value).__name__, value)


def _same_multiset(sent: list[object], got: list[object]) -> bool:
    return Counter(_keys(sent)) == Counter(_keys(got))
