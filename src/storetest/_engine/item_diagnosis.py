"""Name what an item history did to its items (a number's type changed, raw arguments
re-encoded, the oldest items returned for a limit, two ids' keys colliding), in words a
store author can act on. Every function returns one line and never raises; text is
described by :func:`storetest._engine.diagnosis.describe_text`, as for transcripts."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Final

from storetest._engine.diagnosis import describe_id_merge, describe_text, shorten
from storetest.items import MISSING, first_difference, same_value

__all__ = ["describe_item", "describe_item_id_merge", "describe_items", "describe_limit", "reordered"]


#: LangChain's message types (``message_to_dict``'s ``type``) and their classes.
_LANGCHAIN: Final = {"human": "HumanMessage", "ai": "AIMessage", "system": "SystemMessage", "tool": "ToolMessage",
                     "chat": "ChatMessage", "function": "FunctionMessage", "remove": "RemoveMessage"}
#: A plain ``{"role", "content"}`` item's role, as a LangChain type.
_ROLE_TYPES: Final = {"user": "human", "assistant": "ai", "system": "system"}
#: What a field holds when nothing was written to it.
_DEFAULTS: Final[tuple[object, ...]] = (None, "", 0, False, [], {})


def _langchain_form(item: object) -> bool:
    return isinstance(item, dict) and isinstance(item.get("data"), dict) and isinstance(item.get("type"), str)


def _kind(item: object, langchain: bool) -> str | None:
    """What kind of message an item is: a LangChain class, else its type and role."""
    if not isinstance(item, dict):
        return None
    if _langchain_form(item):
        return _LANGCHAIN.get(str(item["type"]), f"a {item['type']!r} message")
    role = item.get("role")
    if langchain and isinstance(role, str) and role in _ROLE_TYPES and set(item) <= {"role", "content"}:
        return _LANGCHAIN[_ROLE_TYPES[role]]
    # An item with a role and no type is a message (the Agents SDK's EasyInputMessage).
    kind = [f"type {item.get('type', 'message')!r}"] if isinstance(item.get("type", role), str) else []
    kind += [f"role {role!r}"] if isinstance(role, str) else []
    return "an item of " + ", ".join(kind) if kind else None


def _article(kind: str) -> str:
    return kind if kind.startswith(("a ", "an ")) else ("an " if kind[0] in "AEIOU" else "a ") + kind


def _renamed(sent: object, got: object, path: str = "") -> str | None:
    """Where a field of ``sent`` came back under another key, its value kept."""
    if isinstance(sent, dict) and isinstance(got, dict):
        new = [k for k in got if k not in sent]
        for key in (k for k in sent if k not in got):
            for other in new:
                if same_value(sent[key], got[other]):
                    return f"at {path}.{key}: the field came back renamed to {other!r}, its value kept"
        pairs = [(f"{path}.{k}", sent[k], got[k]) for k in sent if k in got]
    elif isinstance(sent, list) and isinstance(got, list) and len(sent) == len(got):
        pairs = [(f"{path}[{i}]", a, b) for i, (a, b) in enumerate(zip(sent, got, strict=True))]
    else:
        return None
    for where, a, b in pairs:
        if not same_value(a, b):
            return _renamed(a, b, where)
    return None


def describe_item(sent: object, got: object) -> str:
    """What happened to one item (compared type for type): a kind of message mapped to
    another, a field renamed, dropped or defaulted, a number coerced, text transformed."""
    found = first_difference(sent, got)
    if found is None:
        return "unchanged"
    langchain = _langchain_form(sent) or _langchain_form(got)
    was, now = _kind(sent, langchain), _kind(got, langchain)
    if was and now and was != now:
        return (f"a type or role mapped to another: {_article(was)} came back as {_article(now)} (the store "
                "keeps fewer kinds of message than it is given, or rebuilds each from a field it does not keep)")
    path, a, b = found
    where = f"at {path}" if path else "the item"
    renamed = _renamed(sent, got) if b is MISSING else None
    if renamed:
        return renamed
    if b is MISSING:
        return f"{where}: the key was dropped (it held {shorten(a, 60)})"
    if a is not MISSING and a not in _DEFAULTS and any(b is d or (type(b) is type(d) and b == d) for d in _DEFAULTS):
        return (f"{where}: {shorten(a, 60)} came back as {b!r}, the field's default (a field the store does not "
                "write, read back with its default)")
    if isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, str) and \
            b.strip() in (str(a), repr(a), json.dumps(a)):
        return (f"{where}: the number {shorten(a, 40)} came back as the string {shorten(b, 40)}: numbers coerced to "
                "text (a TEXT column, or a codec that writes every value as a string)")
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


def describe_items(sent: Sequence[object], got: object, elsewhere: Mapping[str, Sequence[object]] | None = None,
                   batches: Sequence[int] = ()) -> str:
    """What happened to a history: items lost, duplicated, reordered, or one changed;
    lost items are placed (after position N, whole batches, a batch in part, across a
    batch boundary).

    :param elsewhere: what the caller knows beyond ``sent``: items held by other
        sessions, or once held by this one (``{"session 'x'": [...], "this session before
        its clear": [...]}``), so items that should not be there are said to come from
        there, not called never added.
    :param batches: the sizes of the ``add_items`` calls ``sent`` was added in, in order.
    """
    if not isinstance(got, list):
        return f"get_items() returned {type(got).__name__}, not a list"
    sent = list(sent)
    # Each item's key once: an item can be a MiB of text, and a history hundreds of items.
    sk, gk = _keys(sent), _keys(got)
    if len(got) == len(sent):
        changed = [i for i, (a, b) in enumerate(zip(sent, got, strict=True)) if first_difference(a, b)]
        if changed and Counter(sk) == Counter(gk):
            if gk == sk[::-1]:
                return "items came back newest first (the protocol's order is oldest first)"
            return "items came back in a different order than they were added"
        if changed:
            i = changed[0]
            return f"item {i} changed: {describe_item(sent[i], got[i])}"
        return "unchanged"
    if len(got) < len(sent):
        n = len(sent) - len(got)
        unique = list(dict.fromkeys(sk))
        if len(unique) < len(sent) and gk == unique:
            return (f"identical items deduplicated: {len(sent)} added, {len(got)} came back, each repeat dropped "
                    "(a unique constraint on content, or a set); a history keeps an item added twice, twice")
        if not got:
            return f"all {n} item(s) were lost: the read returned []" + _in_batches(range(len(sent)), batches)
        if gk == sk[: len(got)]:
            return f"the last {n} item(s) were lost: every item after position {len(got) - 1}" + \
                _in_batches(range(len(got), len(sent)), batches)
        if gk == sk[n:]:
            return f"the first {n} item(s) were lost" + _in_batches(range(n), batches)
        lost = _lost(sk, gk)
        if lost is not None and lost == list(range(lost[0], lost[-1] + 1)):
            span = f"#{lost[0]}" if n == 1 else f"#{lost[0]} to #{lost[-1]}"
            return f"{n} item(s) lost of {len(sent)}: {span}" + _in_batches(lost, batches)
        return f"{n} item(s) lost of {len(sent)}"
    known_sent = set(sk)
    extra = [k for k in gk if k not in known_sent]
    if not extra:
        return f"{len(got) - len(sent)} item(s) came back twice"
    for where, items in (elsewhere or {}).items():
        if set(extra) <= set(_keys(items)):
            return f"{len(extra)} item(s) came back that belong to {where}, not to what this session holds now"
    # From several places, or some from nowhere the caller knows: say each.
    found, left = [], list(extra)
    for where, items in (elsewhere or {}).items():
        known = set(_keys(items))
        here = [k for k in left if k in known]
        if here:
            found.append(f"{len(here)} to {where}")
            left = [k for k in left if k not in known]
    if found:
        never = f", {len(left)} never added anywhere" if left else ""
        return (f"{len(extra)} item(s) came back that are not this session's: they belong "
                + ", ".join(found) + never)
    return f"{len(extra)} item(s) that were never added came back"


def _lost(keys: Sequence[str], have: Sequence[str]) -> list[int] | None:
    """The positions of ``keys`` (the items sent) missing from ``have`` (the items got),
    when ``have`` is ``keys`` with items removed (in order); ``None`` when it is not."""
    lost, j = [], 0
    for i, key in enumerate(keys):
        if j < len(have) and have[j] == key:
            j += 1
        else:
            lost.append(i)
    return lost if j == len(have) and lost else None


def _in_batches(lost: Sequence[int], batches: Sequence[int]) -> str:
    """Where the lost positions (contiguous) lie among the ``add_items`` batches."""
    if len(batches) < 2 or sum(batches) <= lost[-1]:
        return ""
    starts = [sum(batches[:k]) for k in range(len(batches))]
    first = max(k for k, s in enumerate(starts) if s <= lost[0])
    last = max(k for k, s in enumerate(starts) if s <= lost[-1])
    whole = lost[0] == starts[first] and lost[-1] == starts[last] + batches[last] - 1
    if whole:
        which = f"batch #{first}" if first == last else f"batches #{first} to #{last}"
        return (f" ({which} of {len(batches)}, whole: an add_items() call acknowledged and not kept, "
                "or its write overwritten by the next)")
    if first == last:
        return (f" (batch #{first} of {len(batches)} in part: {len(lost)} of its {batches[first]} items; a batch "
                "written item by item, or cut)")
    return (f" (across a batch boundary, from batch #{first} to batch #{last} of {len(batches)}: the loss follows "
            "positions, not add_items() calls: a cut at a count, or a read from a wrong offset)")


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
        if len(keys) < min(limit, len(want)) and keys == want[len(want) - len(keys):]:
            which = f"only the latest {len(keys)} of the {min(limit, len(want))} items asked for" if keys else "[]"
            return (f"get_items({limit}) returned {which} ({len(want)} stored): the read started past the items, "
                    "at an offset computed from "
                    "a stored count that is too high (OFFSET count - limit, with a count a pop or delete did not "
                    "lower)")
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


def reordered(sent: Sequence[object], got: object) -> bool:
    """Whether ``got`` holds the items of ``sent``, each as many times, in another order."""
    return isinstance(got, list) and _same_multiset(list(sent), got) and _keys(got) != _keys(list(sent))


def _same_multiset(sent: list[object], got: list[object]) -> bool:
    return Counter(_keys(sent)) == Counter(_keys(got))
