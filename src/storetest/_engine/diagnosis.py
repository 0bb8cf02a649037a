"""Name the corruption: given what went into a store and what came out, say what kind
of damage it is (keys reordered, NUL lost, sessions merged by case...), in words a
store author can act on. Every function returns one line, never raises."""

from __future__ import annotations

import difflib
import fnmatch
import html
import json
import re
import string
import unicodedata
import urllib.parse
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Final

from storetest._engine.explain import backslash_decoded, explain_text, minimal_diff
from storetest.contract import Attachment, Content, Message, Text, ToolCall, ToolResult
from storetest.entries import Compaction, Custom, Entry

__all__ = [
    "SAME_NUMBERS",
    "describe_backend_refusal",
    "describe_entry",
    "describe_id_merge",
    "describe_log",
    "describe_steers",
    "describe_text",
    "describe_time",
    "describe_transcript",
    "describe_unseen_steers",
    "is_reordered",
    "key_scheme_clash",
    "name_items",
    "numbered_alike",
    "order_seen",
    "shorten",
]


def shorten(value: object, limit: int = 120) -> str:
    """``repr(value)``, cut in the middle when long so both ends stay visible."""
    text = repr(value)
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]} ({len(text)} chars)"


def _json_pairs(text: str) -> object:
    """Parse keeping every key, duplicates and order included."""
    return json.loads(text, object_pairs_hook=lambda pairs: ("obj", pairs))


def _has_duplicate_keys(value: object) -> bool:
    if isinstance(value, tuple) and value[:1] == ("obj",):
        pairs = value[1]
        keys = [k for k, _ in pairs]
        return len(keys) != len(set(keys)) or any(_has_duplicate_keys(v) for _, v in pairs)
    if isinstance(value, list):
        return any(_has_duplicate_keys(v) for v in value)
    return False


def _key_orders(value: object) -> list[list[str]]:
    if isinstance(value, tuple) and value[:1] == ("obj",):
        pairs = value[1]
        orders = [[k for k, _ in pairs]]
        for _, v in pairs:
            orders += _key_orders(v)
        return orders
    if isinstance(value, list):
        return [o for v in value for o in _key_orders(v)]
    return []


# A JSON string, written as a loop that takes a run of plain characters at a time (the
# alternation per character of '"(?:[^"\\]|\\.)*"' is 5x slower on a 256 KiB string).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NUMBER = re.compile(_STRING.pattern + r'|-?\d[\d.eE+-]*')
_SPACE = re.compile(r"\s+")


def _numbers(text: str) -> list[str]:
    return [t for t in _NUMBER.findall(text) if not t.startswith('"')]


def _spaces(text: str) -> list[str]:
    """The runs of whitespace between a JSON text's tokens (those inside strings left out)."""
    return _SPACE.findall(_STRING.sub('""', text))


def _describe_json(sent: str, got: str) -> str | None:
    try:
        sent_value = _json_pairs(sent)
        got_value = _json_pairs(got)
    except ValueError:
        return None
    found: list[str] = []
    if _has_duplicate_keys(sent_value) and not _has_duplicate_keys(got_value):
        found.append("duplicate key dropped")
    sent_orders, got_orders = _key_orders(sent_value), _key_orders(got_value)
    if sent_orders != got_orders and (
        [sorted(set(o)) for o in sent_orders] == [sorted(set(o)) for o in got_orders]
        or "duplicate key dropped" in found
    ):
        found.append("keys reordered")
    if _spaces(sent) != _spaces(got):
        found.append("whitespace changed")
    sent_numbers, got_numbers = Counter(_numbers(sent)), Counter(_numbers(got))
    if sum(sent_numbers.values()) == sum(got_numbers.values()) and sent_numbers != got_numbers:
        before = sorted(sent_numbers - got_numbers)[0]
        after = sorted(got_numbers - sent_numbers)[0]
        found.append(f"number rewritten ({before} became {after})")
    if "\\u" in sent and sorted(_STRING.findall(sent)) != sorted(_STRING.findall(got)):
        found.append("escape sequences rewritten")
    if not found:
        return None
    return "raw JSON re-encoded (" + ", ".join(found) + "): the store parsed the arguments, as a " \
        "Postgres jsonb or MySQL JSON column does; keep them as text"


def describe_text(sent: str, got: str) -> str:
    """What happened to one piece of text between ``sent`` and ``got``."""
    if sent == got:
        return "unchanged"
    if not isinstance(got, str):
        if isinstance(got, (int, float)) and not isinstance(got, bool):
            return (
                f"came back as {type(got).__name__} {got!r}, not str: a column with numeric "
                "affinity (SQLite JSON, STRING or NUMERIC) turned the text into a number"
            )
        return f"came back as {type(got).__name__}, not str"
    explained = explain_text(sent, got, _describe_json)
    if explained:
        return explained
    if "\ufffd" in got and "\ufffd" not in sent:
        return "characters replaced by U+FFFD (an encoding that cannot hold them, e.g. utf8mb3 or latin1)"
    if "?" in got and len(got) == len(sent) and "?" not in sent:
        return "characters replaced by '?' (a charset that cannot hold them, e.g. utf8mb3 or latin1)"
    return "text changed, by no known transform: " + minimal_diff(sent, got)


def _describe_part(sent: Content, got: Content) -> str:
    if type(sent) is not type(got):
        return f"a {type(sent).__name__} came back as a {type(got).__name__}"
    if isinstance(sent, Attachment):
        assert isinstance(got, Attachment)
        if sent.data != got.data:
            try:
                if got.data == sent.data.decode("utf-8", "replace").encode("utf-8"):
                    return "attachment bytes decoded as text (invalid UTF-8 replaced)"
            except Exception:
                pass
            if len(got.data) < len(sent.data) and sent.data.startswith(got.data):
                return (f"Attachment.data: truncated at {len(got.data)} bytes of {len(sent.data)} "
                        "(a length-limited column such as BLOB or VARBINARY)")
            return f"attachment bytes changed ({len(sent.data)} bytes went in, {len(got.data)} came out)"
        return f"media_type: {describe_text(sent.media_type, got.media_type)}"
    fields: tuple[str, ...] = {
        Text: ("text",),
        ToolCall: ("id", "name", "arguments"),
        ToolResult: ("call_id", "content", "is_error"),
    }[type(sent)]
    for field in fields:
        a, b = getattr(sent, field), getattr(got, field)
        if a != b:
            if isinstance(a, str) and isinstance(b, str):
                return f"{type(sent).__name__}.{field}: {describe_text(a, b)}"
            return f"{type(sent).__name__}.{field}: {a!r} came back as {b!r}"
    return "unchanged"


def is_reordered(sent: Sequence[object], got: Sequence[object]) -> bool:
    """Whether ``got`` holds exactly the items of ``sent``, in another order."""
    if len(sent) != len(got) or list(sent) == list(got):
        return False
    if all(isinstance(m, Message) for m in (*sent, *got)):
        # Messages hold only text, bytes and booleans: equal reprs mean equal messages, so
        # messages that differ as a multiset differ in repr too (hashing a MiB message is
        # cheap, its repr is not).
        try:
            if Counter(sent) != Counter(got):
                return False
        except TypeError:  # a store's message holding a list: compared by repr below
            pass
    return Counter(map(repr, sent)) == Counter(map(repr, got))


def order_seen(sent: Sequence[object], got: Sequence[object], limit: int = 12) -> str:
    """Where each item of ``got`` was in ``sent``: ``[0, 1, 10, 11, 2, ...]``."""
    where: dict[str, list[int]] = {}
    for i, item in enumerate(sent):
        where.setdefault(repr(item), []).append(i)
    positions = [str(where[repr(item)].pop(0)) if where.get(repr(item)) else "?" for item in got]
    shown = positions[:limit] + (["..."] if len(positions) > limit else [])
    return "[" + ", ".join(shown) + "]"


def _excerpt(item: object) -> str:
    if isinstance(item, Message):
        text = next((p.text for p in item.content if isinstance(p, Text)), None)
        inner = shorten(text, 40) if text is not None else \
            ", ".join(type(p).__name__ for p in item.content) or "no content"
        return f"{item.role} {inner}"
    if isinstance(item, Entry):
        return repr(item.id)
    return shorten(item, 40)


def name_items(sent: Sequence[object], got: Sequence[object], noun: str = "message",
               limit: int = 3) -> str:
    """The items of ``sent`` missing from ``got`` and the items of ``got`` never in
    ``sent``, each by position and a short excerpt: ``1 message lost: #1234 (user 'x')``."""
    matcher = difflib.SequenceMatcher(None, list(map(repr, sent)), list(map(repr, got)), autojunk=False)
    lost: list[str] = []
    extra: list[str] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op in ("delete", "replace"):
            lost += [f"#{i} ({_excerpt(sent[i])})" for i in range(i1, i2)]
        if op in ("insert", "replace"):
            extra += [f"#{j} ({_excerpt(got[j])})" for j in range(j1, j2)]
    parts = []
    for label, items in ((f"{noun}(s) lost", lost), (f"{noun}(s) never saved came back", extra)):
        if items:
            more = f" and {len(items) - limit} more" if len(items) > limit else ""
            parts.append(f"{len(items)} {label}: {', '.join(items[:limit])}{more}")
    return "; ".join(parts) or f"{len(sent)} {noun}s sent, {len(got)} came back"


def describe_transcript(
    sent: Sequence[Message], got: Sequence[Message], previous: Sequence[Message] = (), *, first: int = 0
) -> str:
    """What happened to a saved transcript; ``previous`` is what the session held before;
    ``first`` is the position of ``sent[0]`` in a longer transcript (for the labels)."""
    sent, got, previous = list(sent), list(got), list(previous)
    if sent == got:
        return "unchanged"
    if got == previous and sent != previous:
        if not sent:
            return "saving an empty list left the old transcript in place"
        return "the save was ignored: the previous transcript is still there"
    if previous and got == previous + sent:
        return "appended instead of replaced: the save added to the old transcript"
    shape = _sequence_transform(sent, got)
    if shape:
        return shape
    if len(got) != len(sent):
        if got == sent[: len(got)]:
            return (f"messages lost: {len(got)} of {len(sent)} came back (the rest cut off, from "
                    f"#{len(got)} ({_excerpt(sent[len(got)])}) on)")
        if got == sent + sent:
            return "messages duplicated: the transcript came back twice"
        return f"{len(sent)} messages saved, {len(got)} came back: " + name_items(sent, got)
    if is_reordered(sent, got):
        return f"messages reordered: they came back in the saved positions {order_seen(sent, got)}"
    for i, (a, b) in enumerate(zip(sent, got, strict=True), start=first):
        if a == b:
            continue
        if a.role != b.role:
            return f"message {i}: role {a.role!r} came back as {b.role!r}"
        if len(a.content) != len(b.content):
            return (f"message {i}: {len(a.content)} content parts saved, {len(b.content)} came back: "
                    + name_items(a.content, b.content, "content part"))
        if is_reordered(a.content, b.content):
            kinds = ", ".join(type(p).__name__ for p in b.content)
            return (f"message {i}: content parts reordered: they came back in the saved positions "
                    f"{order_seen(a.content, b.content)} ({kinds}); content is ordered")
        for j, (pa, pb) in enumerate(zip(a.content, b.content, strict=True)):
            if pa != pb:
                return f"message {i}, content[{j}] {_describe_part(pa, pb)}"
    return "transcript changed"


def _merged_by_role(messages: Sequence[Message]) -> list[Message]:
    merged: list[Message] = []
    for m in messages:
        if merged and merged[-1].role == m.role:
            merged[-1] = Message(m.role, merged[-1].content + m.content)
        else:
            merged.append(m)
    return merged


def _texts(message: Message) -> list[str]:
    return [p.text for p in message.content if isinstance(p, Text)]


def _texts_joined(runs: list[Message], got: list[Message]) -> bool:
    """Each message of ``got`` has its run's role and holds every text of the run, in order."""
    if [m.role for m in got] != [m.role for m in runs]:
        return False
    for run, one in zip(runs, got, strict=True):
        joined, at = "\n".join(_texts(one)), 0
        for text in _texts(run):
            found = joined.find(text, at)
            if found < 0:
                return False
            at = found + len(text)
    return True


def _sequence_transform(sent: list[Message], got: list[Message]) -> str | None:
    """A known reshaping of the whole list: read newest first, twins dropped, adjacent
    messages of one role merged (first exactly, then by their roles alone)."""
    if len(sent) > 2 and got == sent[::-1]:  # two swapped are just "reordered"
        return (f"messages came back newest first: all {len(sent)} in reverse order (a read ordered by "
                "position descending, or a list pushed at its head)")
    unique = list(dict.fromkeys(sent))
    if len(unique) < len(sent) and got == unique:
        return (f"identical messages deduplicated: {len(sent)} saved, {len(got)} came back, each repeat "
                "dropped (a unique constraint on content, or a set)")
    if len(got) < len(sent):
        runs = _merged_by_role(sent)
        if len(runs) < len(sent) and (got == runs or _texts_joined(runs, got)):
            how = "their content parts joined" if got == runs else "their texts joined into one"
            return (f"adjacent messages of the same role merged into one: {len(sent)} saved, {len(got)} came "
                    f"back, one per run of a role ({how}); a transcript keeps every message as saved")
    return None


def _examples(items: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(shorten(s, 40) for s in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


#: What a steer numbered by its handle, not by the database, does: the line's cause.
TAKEN_AGAIN = ("taken before came back again: a take returned them and did not remove them (the DELETE missing "
               "or never committed)")
SAME_NUMBERS = ("two handles numbered their steers alike: one's steer replaced the other's (a steer's sequence "
                "number counted per handle, in the process or cached from one read of max(seq), and the steer "
                "stored under it with an upsert); draw the number from the database (an identity column, INCR)")


#: A handle that found a queue empty once and answered ``[]`` after another handle added.
CACHED_EMPTY = ('a cached "queue is empty" that another handle\'s add did not invalidate (the handle stopped '
                "asking the backend once it found the queue empty)")


def describe_unseen_steers(taker: int, sent: Sequence[str], adders: Sequence[int], took: object,
                           found_empty: bool, sees_fresh: bool) -> str | None:
    """A take on handle ``taker`` returned ``[]`` while ``sent`` was queued, every steer of it
    added through other handles (``adders``), and a take on ``adders[0]`` right after it
    returned ``took``; ``None`` unless that take returned ``sent`` (else they were lost).

    A cached "queue is empty" is named only on its evidence: the taker's previous take of
    the session returned ``[]`` and it added nothing there since (``found_empty``), and it
    took a steer ``adders[0]`` then left on a new session (``sees_fresh``): it sees that
    handle's adds except where it found the queue empty. Otherwise the line says what
    was seen: the steers were stored, and the taker did not see them.
    """
    if took != list(sent):
        return None
    by = " and ".join(f"handle {h}" for h in adders)
    line = (f"a take on handle {taker} returned [] after {by}'s add of {len(sent)} steer(s) ({_examples(sent)}), "
            f"and a take on handle {adders[0]} then returned them")
    if found_empty and sees_fresh:
        return (f"{line}; handle {taker}'s previous take had found the queue empty (it added nothing since), "
                f"and it does take a steer handle {adders[0]} leaves on a new session: {CACHED_EMPTY}")
    seen = "" if sees_fresh else f" (nor a steer handle {adders[0]} left on a new session)"
    return f"{line}: the steers were stored, and handle {taker} did not see them{seen}"


def numbered_alike(sent: Sequence[str], got: Sequence[str], numbers: Sequence[tuple[int, int]]) -> bool:
    """Whether ``got`` is ``sent`` stored under each steer's number within its handle
    (``numbers[i]`` is ``(handle, n)`` for ``sent[i]``), a later steer replacing an
    earlier one of another handle with the same number, read back in number order."""
    keyed: dict[int, tuple[int, str]] = {}
    for text, (handle, n) in zip(sent, numbers, strict=True):
        keyed[n] = (handle, text)
    # A handle never reuses a number, so a number held twice was held by two handles.
    return len(keyed) < len(sent) and [keyed[n][1] for n in sorted(keyed)] == list(got)


def describe_steers(sent: Sequence[str], got: Sequence[str],
                    numbers: Sequence[tuple[int, int]] | None = None, taken: Collection[str] = ()) -> str:
    """What happened to a queue of steers: lost, duplicated, unexpected, out of order.

    :param numbers: which handle added each steer of ``sent`` and how many that handle had
        added to the session before (``(handle, n)``): steers two handles numbered alike,
        one replacing the other, are named so, not "lost" or "identical steers merged".
    :param taken: steers earlier takes of the session returned: one back again is named
        so, not "never added".
    """
    sent, got = list(sent), list(got)
    if sent == got:
        return "unchanged"
    if numbers is not None and numbered_alike(sent, got, numbers):
        lost = Counter(sent) - Counter(got)
        return f"{sum(lost.values()) or len(sent) - len(got)} steer(s) replaced: {SAME_NUMBERS}"
    want, have = Counter(sent), Counter(got)
    lost = want - have
    extra = have - want
    problems = []
    if lost and extra and len(sent) == len(got):
        pairs = [(a, b) for a, b in zip(sent, got, strict=True) if a != b]
        return f"steer text changed: {describe_text(pairs[0][0], pairs[0][1])}"
    if lost:
        if len(set(sent)) < len(sent) and set(got) == set(sent):
            problems.append(f"identical steers merged into one ({sum(lost.values())} lost: "
                            f"{_examples(list(lost.elements()))})")
        else:
            problems.append(f"{sum(lost.values())} steer(s) lost: {_examples(list(lost.elements()))}")
            if got and got == sent[: len(got)]:
                problems[-1] += (f" (the take returned only the first {len(got)} of {len(sent)} steers, "
                                 f"{sum(len(x.encode()) for x in got):,} of {sum(len(x.encode()) for x in sent):,} "
                                 "bytes: a take capped by a page size or a byte budget)")
    dup = Counter({k: have[k] - want[k] for k in have if k in want and have[k] > want[k]})
    if dup:
        problems.append(f"{sum(dup.values())} steer(s) duplicated: {_examples(list(dup))}")
    again = [k for k in have if k not in want and k in taken]
    if again:
        problems.append(f"{len(again)} steer(s) {TAKEN_AGAIN}: {_examples(again)}")
    unexpected = [k for k in have if k not in want and k not in taken]
    if unexpected:
        problems.append(f"{len(unexpected)} steer(s) never added came back: {_examples(unexpected)}")
    if not problems:
        if got == sent[::-1]:
            return "steers returned last-in-first-out (newest first)"
        return f"steers out of order: they came back in the added positions {order_seen(sent, got)}"
    return ", ".join(problems)


def _strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", s) if not unicodedata.combining(c))


#: The cause named where no likeness of two ids explains their merge.
_HASHED_OR_CUT: Final = "two distinct ids share data (ids hashed or truncated?)"


def _decoded_alike(decode: Callable[[str], str], related: Collection[str]) -> Callable[[str], str]:
    """A key that maps an id to its decoding where that is one of ``related``."""
    return lambda i: decoded if (decoded := decode(i)) in related else i


def describe_id_merge(one: str, other: str, *, read_back_own: Collection[str] | None = None,
                      shared: Callable[[str, str], bool | None] | None = None,
                      ids: Sequence[str] = ()) -> str:
    """Why a store would treat two distinct session ids as one: every way they differ
    that some collation or key column ignores, named together (``'A'`` and ``'a  '``
    differ by case *and* trailing spaces).

    ``read_back_own``, where the caller knows it: reading ``one`` gave what was saved to
    ``other``, and these ids, saved before ``other``, read back their own. A ``LIKE``
    is then named only where it explains the merge: ``one`` read as a pattern matches
    ``other``, or ``other``, written as a pattern, matches ``one`` and none of those.

    ``shared`` and ``ids``, where the caller saved to each of ``ids`` and read each back:
    whether two of them were found sharing data (``None`` where it cannot tell). A cause
    that maps ids to keys (cut at a NUL, a collation, decoding, truncation) is then named
    only if no two of ``ids`` that it maps to one key were found apart: a hash that
    happens to merge ``'a'`` with ``'a\\x00b'`` keeps ``'a\\x00c'`` apart, and is not called
    a cut at the NUL."""

    def explains_pairs(pairs: Iterable[tuple[str, str]]) -> bool:
        return shared is None or not any(shared(x, y) is False for x, y in pairs if x != y)

    def explains(key: Callable[[str], object]) -> bool:
        """No two ids this key maps to one were found apart."""
        if shared is None:
            return True
        groups: dict[object, list[str]] = {}
        for i in ids:
            groups.setdefault(key(i), []).append(i)
        return explains_pairs((x, y) for group in groups.values() for x in group for y in group)

    if shared is not None:
        # Ids alike in no way a key scheme forgets share data too: the store merges ids by
        # something else (a hash, a cut), and this pair's likeness is a coincidence.
        unrelated = next(((x, y) for x in ids for y in ids
                          if x < y and shared(x, y) and describe_id_merge(x, y) == _HASHED_OR_CUT), None)
        if unrelated is not None:
            return (f"{_HASHED_OR_CUT}: {unrelated[0]!r} and {unrelated[1]!r} share data too, and differ in no "
                    "way a collation or key scheme forgets")
    if "\x00" in one + other and one.split("\x00")[0] == other.split("\x00")[0] and \
            explains(lambda i: i.split("\x00")[0]):
        return "ids were cut at a NUL character"
    for decode, kind in ((urllib.parse.unquote_plus, "percent-escapes (URL-decoded on its way)"),
                         (html.unescape, "HTML entities (HTML-unescaped on its way)"),
                         (backslash_decoded, "backslash escapes (unescaped on its way)"),
                         (lambda s: unicodedata.normalize("NFKC", s), "NFKC compatibility forms")):
        if unicodedata.normalize("NFC", one) != unicodedata.normalize("NFC", other) and (
                decode(one) == other or decode(other) == one or decode(one) == decode(other)) and explains(
                # A store may decode less than this (unquote, not unquote_plus): of the ids
                # this decoding relates, only those it decodes alike are predicted to merge.
                _decoded_alike(decode, (decode(one), decode(other)))):
            return f"ids that are {kind} of each other were merged: an id must be kept as given"
    shorter = min(len(one), len(other))
    longer = max(one, other, key=len)
    suffix = longer[shorter:]
    # Each cause below predicts more merges among ids: trailing spaces, every id beside
    # itself plus spaces; a key or scan joined with a separator, every id beside itself
    # plus the same suffix; a cut or a startswith, every id beside the longer ids it
    # starts (from that length on).
    if not (one.startswith(other) or other.startswith(one)):
        borne_out = False
    elif suffix.strip(" ") == "":
        borne_out = explains(lambda i: i.rstrip(" "))
    elif suffix[0] in string.punctuation:
        borne_out = explains_pairs((i, i + suffix) for i in ids if i + suffix in ids)
    else:
        borne_out = explains_pairs((u, v) for u in ids if len(u) >= shorter for v in ids if v.startswith(u))
    if borne_out:
        if suffix.strip(" ") == "":
            return "ids that differ only by trailing spaces were merged (a PAD SPACE collation or strip())"
        if longer[shorter] in ":/.":
            return (
                f"an id was merged with the id it starts with plus {longer[shorter:]!r}: keys built as "
                "prefix:<id> and prefix:<id>:<kind> collide, or a prefix scan under "
                f"{longer[shorter]!r} reaches the longer id (escape the id, or close it in a hash tag)"
            )
        if longer[shorter] in string.punctuation:
            return (
                f"an id was merged with the id it starts with plus {longer[shorter:]!r}: a key or prefix "
                f"scan joined with {longer[shorter]!r} reaches the longer id (escape the separator in ids)"
            )
        return (
            f"an id was merged with its {shorter}-character prefix "
            "(ids truncated, or matched with LIKE/startswith)"
        )
    # Only where one id, read as a pattern, does match the other: two ids a hash merged
    # may hold a '*' by chance.
    if any(c in one + other for c in "*?[]") and (fnmatch.fnmatchcase(other, one) or fnmatch.fnmatchcase(one, other)):
        return ("an id with glob characters (* ? [ ]) matched another id: a SCAN/KEYS MATCH or fnmatch "
                "pattern built from an unescaped id")
    differences = []
    a, b = one.rstrip(" "), other.rstrip(" ")
    if (a, b) != (one, other):
        differences.append("trailing spaces")
    if a != b and unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b):
        differences.append("Unicode normalization (NFC vs NFD)")
    a, b = unicodedata.normalize("NFC", a), unicodedata.normalize("NFC", b)
    if _strip_accents(a) != a or _strip_accents(b) != b:
        if _strip_accents(a).casefold() == _strip_accents(b).casefold() and a.casefold() != b.casefold():
            differences.append("accents")
    if _strip_accents(a) != _strip_accents(b) and _strip_accents(a).casefold() == _strip_accents(b).casefold():
        differences.append("case")
    def collated(i: str) -> str:
        if "trailing spaces" in differences:
            i = i.rstrip(" ")
        if "Unicode normalization (NFC vs NFD)" in differences or "accents" in differences:
            i = unicodedata.normalize("NFC", i)
        if "accents" in differences:
            i = _strip_accents(i)
        # lower(), not casefold(): a store that lowercases keeps 'ß' and 'ss' apart.
        return i.lower() if "case" in differences else i

    if differences and _strip_accents(a).casefold() == _strip_accents(b).casefold() and explains(collated):
        collations = {"case": "case-insensitive", "accents": "accent-insensitive", "trailing spaces": "PAD SPACE"}
        named = [collations[d] for d in differences if d in collations]
        because = f" (a collation that is {', '.join(named)}, or strip()/lower())" if named else ""
        return f"ids that differ only by {' and '.join(differences)} were merged{because}"
    pairs = enumerate(zip(one, other, strict=False))
    common = next((i for i, (x, y) in pairs if x != y), min(len(one), len(other)))
    if common >= 64 and explains(lambda i: i[:common]):
        return (
            f"ids that differ only after their first {common} characters were merged "
            "(the id truncated to fit a key, e.g. VARCHAR(64) or id[:64])"
        )
    if _like_explains(one, other, read_back_own):
        return "ids with SQL wildcards (% or _) matched other ids (LIKE instead of =)"
    return _HASHED_OR_CUT


def _like(pattern: str, value: str) -> bool:
    """Whether SQL ``value LIKE pattern`` holds, case-sensitively (PostgreSQL's ``LIKE``;
    SQLite's and MySQL's match more)."""
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _like_explains(one: str, other: str, read_back_own: Collection[str] | None) -> bool:
    if read_back_own is None:  # no direction known: either id as the pattern
        return _like(one, other) or _like(other, one)
    # A read by pattern returns a match; a write by pattern reaches every match saved before it.
    return _like(one, other) or (_like(other, one) and not any(_like(other, k) for k in read_back_own))


# Redis Cluster's refusal of a multi-key command across slots: the server's reply
# (CROSSSLOT, "Keys in request don't hash to the same slot"), and redis-py's own checks
# before sending ("... all keys must map to the same key slot", "... cluster transaction
# must map to the same slot").
_CROSS_SLOT = re.compile(r"CROSSSLOT|hash to the same slot|must map to the same (key )?slot|CrossSlot")


def describe_backend_refusal(error: str) -> str | None:
    """What a backend's refusal says about the store's keys, when it says something
    (``error`` is the exception's type name and text); ``None`` otherwise."""
    if _CROSS_SLOT.search(error):
        return (
            "keys of one session in different hash slots: a Redis Cluster runs a multi-key command, "
            "transaction or script only inside one slot; put the session id in a hash tag (prefix:{id}:kind)"
        )
    if "WRONGTYPE" in error:
        return (
            "a key holds another kind of value than the store expects: two sessions' keys collide "
            "(keys prefix:<id> and prefix:<id>:messages give session 'x:messages' a key of session 'x')"
        )
    return None


def key_scheme_clash(session: str, ids: Sequence[str]) -> str:
    """Why a call on ``session`` may have failed because of another of ``ids``: one id is
    the other plus a key suffix (``x`` and ``x:messages``), so in a key-value layout the
    two sessions' keys collide (Redis then answers ``WRONGTYPE``). Empty when none is."""
    for other in ids:
        if other != session and (session.startswith(other + ":") or other.startswith(session + ":")):
            return describe_id_merge(session, other)
    return ""


# --- entry logs ------------------------------------------------------------------------


def describe_time(sent: datetime, got: object) -> str:
    """What happened to an entry's creation time (kept exactly: instant and UTC offset)."""
    if not isinstance(got, datetime):
        return f"created_at came back as {type(got).__name__}, not datetime"
    offset, got_offset = sent.utcoffset(), got.utcoffset()
    if got_offset is None:
        return "created_at came back naive: its UTC offset was dropped"
    if got == sent and got_offset != offset:
        return (f"UTC offset lost: {_offset(offset)} came back as {_offset(got_offset)}, same instant "
                "(a timestamptz or BSON date keeps only the instant; keep the offset too)")
    if got_offset != offset:
        shift = got - sent
        if got.replace(tzinfo=None) == sent.replace(tzinfo=None):
            return (f"time shifted by {_offset(shift)}: the wall time was kept and its UTC offset "
                    f"{_offset(offset)} replaced by {_offset(got_offset)}")
        if abs(shift) <= timedelta(hours=26) and not shift % timedelta(minutes=15):
            return (f"time shifted by {_offset(shift)} and its UTC offset {_offset(offset)} lost: stored "
                    "as naive local time and read back as if in another zone")
        return f"created_at changed: {sent.isoformat()} came back as {got.isoformat()}"
    if got == sent.replace(microsecond=0):
        return "created_at truncated to seconds (a DATETIME or integer timestamp without fractions)"
    if got == sent.replace(microsecond=sent.microsecond // 1000 * 1000):
        return "created_at truncated to milliseconds (a BSON or JavaScript date)"
    shift = got - sent
    if timedelta(0) < abs(shift) <= timedelta(hours=26) and not shift % timedelta(minutes=15):
        return (f"time shifted by {_offset(shift)}: stored as naive local time and read back as if in "
                "another zone")
    if abs(shift) < timedelta(seconds=1):
        return f"created_at rounded: {sent.isoformat()} came back as {got.isoformat()}"
    return f"created_at changed: {sent.isoformat()} came back as {got.isoformat()}"


def _offset(delta: timedelta | None) -> str:
    if delta is None:
        return "none"
    sign = "-" if delta < timedelta(0) else "+"
    minutes = abs(delta) // timedelta(minutes=1)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def describe_entry(sent: Entry, got: object) -> str:
    """What happened to one entry of a log."""
    if not isinstance(got, Entry):
        return f"an entry came back as {type(got).__name__}, not Entry"
    if sent == got:
        return "unchanged"
    if got.id != sent.id:
        return f"id {sent.id!r} came back as {got.id!r}: {describe_text(sent.id, got.id)}"
    if got.parent_id != sent.parent_id:
        return f"entry {sent.id!r}: parent {sent.parent_id!r} came back as {got.parent_id!r}"
    if got.kind != sent.kind:
        return f"entry {sent.id!r}: kind {sent.kind!r} came back as {got.kind!r}"
    if got.created_at != sent.created_at or got.created_at.utcoffset() != sent.created_at.utcoffset():
        return f"entry {sent.id!r}: " + describe_time(sent.created_at, got.created_at)
    a, b = sent.payload, got.payload
    if isinstance(a, Message) and isinstance(b, Message):
        return f"entry {sent.id!r}: " + describe_transcript([a], [b])
    if isinstance(a, Custom) and isinstance(b, Custom):
        if a.kind != b.kind:
            return f"entry {sent.id!r}: custom kind: {describe_text(a.kind, b.kind)}"
        return f"entry {sent.id!r}: custom data: {describe_text(a.data, b.data)}"
    if isinstance(a, Compaction) and isinstance(b, Compaction):
        if a.summary != b.summary:
            return f"entry {sent.id!r}: compaction summary: {describe_text(a.summary, b.summary)}"
        return f"entry {sent.id!r}: first_kept_id {a.first_kept_id!r} came back as {b.first_kept_id!r}"
    return f"entry {sent.id!r} changed"


def describe_log(sent: Sequence[Entry], got: Sequence[object]) -> str:
    """What happened to a log between what was appended (in order) and what came back."""
    sent, got = list(sent), list(got)
    if sent == got:
        return "unchanged"
    if not all(isinstance(e, Entry) for e in got):
        bad = next(e for e in got if not isinstance(e, Entry))
        return f"entries() returned a {type(bad).__name__} among the entries"
    entries = [e for e in got if isinstance(e, Entry)]
    sent_ids, got_ids = [e.id for e in sent], [e.id for e in entries]
    if len(entries) == len(sent) and sorted(map(repr, sent_ids)) == sorted(map(repr, got_ids)):
        if sent_ids != got_ids:
            by_time = [e.id for e in sorted(sent, key=lambda e: e.created_at)]
            if got_ids == by_time:
                return ("entries read back sorted by creation time, not in append order (ORDER BY "
                        "created_at: clocks of two writers disagree; order by a sequence)")
            return ("entries read back in a different order than appended: they came back in the "
                    f"appended positions {order_seen(sent_ids, got_ids)}")
        pairs = [(a, b) for a, b in zip(sent, entries, strict=True) if a != b]
        return describe_entry(*pairs[0])
    missing = [i for i in sent_ids if i not in got_ids]
    extra = [i for i in got_ids if i not in sent_ids]
    repeated = sorted({i for i in got_ids if got_ids.count(i) > 1})
    parts = []
    if missing:
        parts.append(f"{len(missing)} entries lost: {_examples(missing)}")
    if repeated:
        parts.append(f"{len(repeated)} entry ids stored twice: {_examples(repeated)}")
    if extra:
        parts.append(f"{len(set(extra))} entries never appended came back: {_examples(list(dict.fromkeys(extra)))}")
    return ", ".join(parts) or f"{len(sent)} entries appended, {len(entries)} came back"
