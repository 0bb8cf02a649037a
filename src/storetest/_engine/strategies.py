"""The adversarial inputs every clause draws from (Hypothesis strategies).

Each strategy leans on what real stores get wrong: text that a collation folds, a
column truncates or a driver re-encodes, and raw tool-call JSON that a JSON column
would rewrite. Sizes are capped so an example stays cheap against a real database;
the size clause covers big values separately.
"""

from __future__ import annotations

import functools
import itertools
import json
import unicodedata
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import strategies as st

from storetest.contract import (
    MAX_ID_BYTES,
    MAX_NAME_BYTES,
    ROLES,
    Attachment,
    Content,
    Message,
    Role,
    Text,
    ToolCall,
    ToolResult,
)
from storetest.entries import KINDS, Compaction, Custom, Entry
from storetest.items import Item, JSONValue

__all__ = [
    "LIMIT_MESSAGES",
    "NASTY_ARGUMENTS",
    "NASTY_ATTACHMENTS",
    "NASTY_JSON",
    "NASTY_MEDIA_TYPES",
    "NASTY_TEXTS",
    "NASTY_TIMES",
    "OFFSETS",
    "attachments",
    "contents",
    "entry_ids",
    "filled",
    "ids",
    "logs",
    "media_types",
    "messages",
    "names",
    "raw_json",
    "steer_texts",
    "texts",
    "times",
    "tool_arguments",
    "transcripts",
]

#: Text that some backend has changed on its way through: NUL, line endings, trailing
#: space, combining marks vs precomposed, 4-byte characters, RTL, SQL wildcards, quotes.
NASTY_TEXTS: tuple[str, ...] = (
    "",
    " ",
    "a ",
    " a",
    "\x00",
    "a\x00b",
    "\r\n",
    "line\r\nbreak\r",
    "\t\v\f",
    "é",
    "e\u0301",
    "ﬁ",
    "İ",
    "ß",
    "👍🏽",
    "🧑‍💻",
    "中文字符",
    "\u202eRTL override",
    "שלום עולם",
    "%_\\'\"`;--",
    "\ufeffBOM",
    "\u2028\u2029",
    "\U0010ffff",
    "\x80\x85 C1 \x91quoted\x92 \x9f",
    "100%41 %e2%82%ac & &amp;",
)

#: Tool-call arguments that a JSON column, a JSON parser or a text normalizer rewrites.
NASTY_ARGUMENTS: tuple[str, ...] = (
    '{"z":1,"a":[1, 2],"z":3}',
    '{"b": 1, "a": 2}',
    '{"long_key": 1, "k": 2}',
    '{ "a" :\n\t1 }',
    '{"e":"\\u00e9","f":"é"}',
    '{"nul":"\\u0000"}',
    '{"emoji":"\\ud83d\\ude00"}',
    '{"slash":"a\\/b"}',
    '{"big":18446744073709551616}',
    '{"neg":-123456789012345678901234567890}',
    '{"f":1.0,"g":-0,"h":1e2,"i":1E+2,"j":0.10}',
    '{"huge":1e400}',
    '{"pi":3.14159265358979323846264338327950288}',
    "[" * 64 + "]" * 64,
    '{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":[]}}}}}}}}',
    "[]",
    "{}",
    "",
    "   ",
    "null",
    '"just a string"',
    '{"truncated": "the model was cut off mid',
    '{"a":1,}',
    "not json at all",
    "{'single': 'quotes'}",
    '{"a":1}\n',
    '\ufeff{"bom":true}',
)

# Characters that UTF-8 can carry: no lone surrogates (no database could store them).
# The same characters as codec="utf-8" (every code point but the surrogates), but that
# codec makes Hypothesis encode every code point once, on a first run, to build a
# table it caches: seconds and some 200 MB (tests/test_working_directory.py).
_chars = st.characters(exclude_categories=["Cs"])

texts = st.one_of(
    st.sampled_from(NASTY_TEXTS),
    st.text(_chars, max_size=40),
    st.lists(st.sampled_from(NASTY_TEXTS), min_size=2, max_size=4).map("".join),
)
"""Text for message content: adversarial pieces, arbitrary Unicode, and mixes."""

steer_texts = texts
"""Steer text: the same adversarial text; identical steers are drawn too."""

_whitespace = st.sampled_from(["", "", " ", "  ", "\n", "\t", "\r\n  "])
_number_texts = st.sampled_from(
    ["0", "-0", "1.0", "1e2", "1E+2", "-1.5e-10", "0.1", "1e400",
     "18446744073709551616", "-99999999999999999999999", "3.141592653589793238462643"]
) | st.integers().map(str)
_string_literals = st.one_of(
    st.text(_chars, max_size=12).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text(_chars, max_size=12).map(json.dumps),
    st.sampled_from(['"\\u00e9"', '"\\u0000"', '"\\ud83d\\ude00"', '"a\\/b"', '"\\n\\t"', '""']),
)


def _json_text(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def array(items: list[str], ws: list[str]) -> str:
        return "[" + ",".join(w + item + w for item, w in zip(items, ws, strict=False)) + "]"

    def obj(pairs: list[tuple[str, str]], ws: str) -> str:
        return "{" + ws + ("," + ws).join(f"{k}{ws}:{ws}{v}" for k, v in pairs) + ws + "}"

    keys = st.sampled_from(['"a"', '"z"', '"id"', '"long_key_name"', '"é"', '"\\u00e9"', '""'])
    return st.one_of(
        st.builds(array, st.lists(children, max_size=4), st.lists(_whitespace, min_size=4, max_size=4)),
        # Keys drawn from a small pool, so duplicate and unsorted keys come up often.
        st.builds(obj, st.lists(st.tuples(keys, children), max_size=5), _whitespace),
    )


raw_json = st.recursive(
    _number_texts | _string_literals | st.sampled_from(["true", "false", "null"]),
    _json_text,
    max_leaves=12,
)
"""Valid JSON text in forms a JSON column rewrites: duplicate and unsorted keys, odd
whitespace, escapes, numbers past 2^64 and in exponent form."""

tool_arguments = st.one_of(
    st.sampled_from(NASTY_ARGUMENTS),
    raw_json,
    # A reply cut off mid-stream: not JSON at all, and a store must keep it anyway.
    st.tuples(raw_json, st.integers(min_value=1, max_value=40)).map(lambda p: p[0][: p[1]]),
)
"""What a model may put in ``ToolCall.arguments``: raw JSON text, valid or not."""

#: Attachments whose bytes are not UTF-8 text: a store that decodes them changes them.
NASTY_ATTACHMENTS: tuple[Attachment, ...] = (
    Attachment("application/octet-stream", b""),
    Attachment("application/octet-stream", b"\x00"),
    Attachment("application/octet-stream", b"\xff\xfe\x00\x80"),
    Attachment("text/plain; charset=latin-1", "é".encode("latin-1")),
    Attachment("image/png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
)

# --- fields at their limits, and the short fields' odd spellings -----------------------


def filled(start: str, size: int) -> str:
    """``start`` made exactly ``size`` bytes of UTF-8 long with a mix of 1- to 4-byte
    characters, so a store cutting at a byte count or a character count is caught."""
    out, used = [start], len(start.encode("utf-8"))
    for char in itertools.cycle("é🙂Ab 中"):
        width = len(char.encode("utf-8"))
        if used + width > size:
            break
        out.append(char)
        used += width
    return "".join(out) + "x" * (size - used)


#: Media types as clients really send them: mixed case, spaces around them, parameters
#: with non-ASCII and quoted values. A store that lower-cases or trims them changes them.
NASTY_MEDIA_TYPES: tuple[str, ...] = (
    "Image/PNG",
    " image/png",
    "image/png ",
    "TEXT/Plain; Charset=UTF-8",
    'text/plain; name="café résumé.txt"',
    "application/x-ünïcødé",
    "image/svg+xml;charset=utf-8",
)

ids = st.one_of(texts, texts.map(lambda s: filled(s, MAX_ID_BYTES)))
"""Tool call ids and the results' ``call_id``: the adversarial text, and ids at
:data:`~storetest.contract.MAX_ID_BYTES` exactly."""

names = st.one_of(texts, texts.map(lambda s: filled(s, MAX_NAME_BYTES)))
"""Tool names: the adversarial text, and names at ``MAX_NAME_BYTES`` exactly."""

media_types = st.one_of(
    st.sampled_from(["image/png", "application/octet-stream", "text/plain; charset=latin-1",
                     *NASTY_MEDIA_TYPES]),
    texts,
    st.sampled_from(NASTY_MEDIA_TYPES).map(lambda s: filled(s, MAX_NAME_BYTES)),
)
"""Attachment media types: common ones, odd spellings, arbitrary text, at the limit."""

#: Messages whose short fields sit exactly at their limits, and ids repeated where the
#: contract allows it (two tool calls with one id in a message; two results for one call):
#: fixed cases, so every run asks them, not a lucky draw.
LIMIT_MESSAGES: tuple[Message, ...] = (
    Message("assistant", (ToolCall(filled("call_", MAX_ID_BYTES), filled("Tool ", MAX_NAME_BYTES), "{}"),)),
    Message("tool", (ToolResult(filled("call_", MAX_ID_BYTES), "result"),)),
    Message("user", (Attachment(filled("image/png; name=", MAX_NAME_BYTES), b"\x89PNG"),)),
    *(Message("user", (Attachment(media_type, b"\x00\xff"),)) for media_type in NASTY_MEDIA_TYPES),
    Message("assistant", (ToolCall("call_same", "lookup", '{"q": 1}'), ToolCall("call_same", "lookup", '{"q": 2}'),
                          ToolCall(" Call_Same ", " Lookup ", "{}"))),
    Message("tool", (ToolResult("call_same", "first answer"), ToolResult("call_same", "second answer", True))),
)

attachments = st.one_of(
    st.sampled_from(NASTY_ATTACHMENTS),
    st.builds(Attachment, media_types, st.binary(max_size=64)),
)

contents: st.SearchStrategy[Content] = st.one_of(
    st.builds(Text, texts),
    st.builds(ToolCall, ids, names, tool_arguments),
    st.builds(ToolResult, ids, texts, st.booleans()),
    attachments,
)

messages = st.builds(
    Message,
    st.sampled_from(sorted(ROLES)),
    st.lists(contents, max_size=4).map(tuple),
)

transcripts = st.lists(messages, max_size=6)
"""A transcript: a few messages, sometimes none."""

_MODEL_POOL = tuple(
    Message("user" if i % 2 == 0 else "assistant", (Text(text),) if i % 3 else (Text(text), ToolCall(
        f"call_{i}", "lookup", NASTY_ARGUMENTS[i % len(NASTY_ARGUMENTS)])))
    for i, text in enumerate([*NASTY_TEXTS[:8], *(f"message {i}" for i in range(8))])
)

model_transcripts = st.lists(st.sampled_from(_MODEL_POOL), max_size=6)
"""Cheap transcripts for the state machine, whose subject is the order of operations,
not their content (the round-trip clauses own that): drawn from a fixed pool."""

model_steers = st.sampled_from(["a", "a", "b", "", " ", *NASTY_TEXTS[:4]])
"""Cheap steer texts for the state machine; repeats are drawn on purpose."""


#: The parts of a twin message, by kind, around its text: kinds that differ only in a
#: tool call's arguments, a tool result in place of text, an attachment's bytes.
_TWIN_PARTS: dict[str, Callable[[str], tuple[Content, ...]]] = {
    "text": lambda text: (Text(text),),
    "result": lambda text: (ToolResult("call_0", text),),
    "call 1": lambda text: (Text(text), ToolCall("call_0", "lookup", '{"q": 1}')),
    "call 2": lambda text: (Text(text), ToolCall("call_0", "lookup", '{"q": 2}')),
    "image 1": lambda text: (Text(text), Attachment("image/png", b"\x89PNG")),
    "image 2": lambda text: (Text(text), Attachment("image/png", b"\x89PNG\x00")),
}


@functools.cache
def _twins() -> dict[Message, st.SearchStrategy[Message]]:
    """Messages a loose comparison takes for one another, each with its twins, the
    messages that differ from it in one way: another role; the text in another form
    (NFC, NFD, upper or lower case, a space before or after, a NUL after); other parts
    around the same text (:data:`_TWIN_PARTS`). Empty messages too, one per role. Made
    on first use, not at import (every process imports this module)."""
    out: dict[Message, st.SearchStrategy[Message]] = {}
    roles: tuple[Role, ...] = ("assistant", "system", "tool", "user")
    assert set(roles) == ROLES
    for base in ("é", "a", "ß", "ﬁ", "line\r\nbreak", "👍🏽"):
        forms = dict.fromkeys([base, unicodedata.normalize("NFC", base), unicodedata.normalize("NFD", base),
                               base.upper(), base.lower(), base + " ", " " + base, base + "\x00"])
        cells = {(form, role, kind): Message(role, parts(form))
                 for form in forms for role in roles for kind, parts in _TWIN_PARTS.items()}
        for (form, role, kind), message in cells.items():
            out[message] = st.sampled_from([*(cells[f, role, kind] for f in forms if f != form),
                                            *(cells[form, r, kind] for r in roles if r != role),
                                            *(cells[form, role, k] for k in _TWIN_PARTS if k != kind)])
    empty = [Message(role, ()) for role in roles]
    out.update({m: st.sampled_from([e for e in empty if e != m]) for m in empty})
    return out


@functools.cache
def _replace_pool() -> st.SearchStrategy[Message]:
    """What the save-replaces clause saves: the twins, the state machine's pool, the
    messages at their limits and the nasty attachments."""
    attachments = [Message("user", (a,)) for a in NASTY_ATTACHMENTS]
    return st.sampled_from([*_twins(), *_MODEL_POOL, *LIMIT_MESSAGES, *attachments])


@st.composite
def replace_saves(draw: st.DrawFn) -> list[list[Message]]:
    """Two to four transcripts saved in turn to one session, for the save-replaces
    clause, whose subject is what a save leaves (the round-trip clauses own the content,
    drawn): fixed messages, each save keeping a drawn prefix of the one before, then
    (often) a twin of the message the previous one had at that position (another role,
    normalization, case, a space, a NUL: what a loosely compared incremental save takes
    for the same message), then new ones."""
    pool, twins = _replace_pool(), _twins()
    saves = [draw(st.lists(pool, max_size=6))]
    for _ in range(draw(st.integers(1, 3))):
        previous = saves[-1]
        keep = draw(st.integers(0, len(previous)))
        following = previous[:keep]
        if keep < len(previous) and previous[keep] in twins and draw(st.booleans()):
            following.append(draw(twins[previous[keep]]))
        following += draw(st.lists(pool, max_size=4))
        saves.append(following)
    return saves

# --- entry logs (storetest.entries) ----------------------------------------------------


def _is_json(text: str) -> bool:
    try:
        Custom("k", text)
    except ValueError:
        return False
    return True

#: UTC offsets a store must keep: none, half and three-quarter hours, both extremes.
OFFSETS: tuple[timezone, ...] = tuple(
    timezone(timedelta(minutes=m)) for m in (0, 60, 330, 345, -570, 765, 840, -720, -1)
)

#: Creation times a store gets wrong: microseconds (dropped to seconds or milliseconds),
#: offsets (normalized to UTC, or dropped to naive local time), before 1970, leap day.
NASTY_TIMES: tuple[datetime, ...] = (
    datetime(2026, 3, 29, 1, 30, 0, 123456, timezone(timedelta(hours=2))),
    datetime(2026, 1, 1, 0, 0, 0, 999999, timezone(timedelta(hours=-9, minutes=-30))),
    datetime(1970, 1, 1, 0, 0, 0, 1, UTC),
    datetime(1969, 12, 31, 23, 59, 59, 999999, timezone(timedelta(hours=14))),
    datetime(2024, 2, 29, 12, 0, 0, 500, timezone(timedelta(hours=5, minutes=45))),
    datetime(2038, 1, 19, 3, 14, 8, 0, timezone(timedelta(hours=-12))),
)

times = st.one_of(
    st.sampled_from(NASTY_TIMES),
    st.datetimes(
        min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
        timezones=st.sampled_from(OFFSETS),
    ),
)
"""Aware creation times, microseconds and odd UTC offsets included."""

entry_ids = st.one_of(
    st.uuids().map(str),
    st.text(_chars, min_size=1, max_size=12),
    st.text(_chars, min_size=1, max_size=12).map(lambda s: filled(s, MAX_ID_BYTES)),
    st.sampled_from(["e", "E", "e ", "é", "e\u0301", "1", "01", "%", "a/b"]),
)
"""Entry ids: exact strings, confusable ones included (a store compares them exactly)."""

_custom_kinds = st.sampled_from(["artifact", "ui-state", "Artifact", " artifact ", "x\u0301",
                                 filled("Kind ", MAX_NAME_BYTES)])


@functools.cache
def _payload(kind: str, simple: bool) -> st.SearchStrategy[Message | Custom | Compaction]:
    """The payload strategy of an entry of ``kind``: made once a process for each of the
    eight (kind, simple) pairs, not once an entry (see :func:`_unique_ids`)."""
    if kind in ("message", "meta"):
        return st.just(Message.text("user", "x")) if simple else messages
    if kind == "custom":
        data = st.just("{}") if simple else st.sampled_from(NASTY_JSON) | raw_json
        return st.builds(Custom, _custom_kinds, data)
    return st.builds(Compaction, st.just("summary") if simple else texts, entry_ids)


def _capped(entry_id: str) -> str:
    """A prefixed id at most ``MAX_ID_BYTES`` long: one past it is cut and refilled to it."""
    raw = entry_id.encode("utf-8")
    if len(raw) <= MAX_ID_BYTES:
        return entry_id
    return filled(raw[: MAX_ID_BYTES - 8].decode("utf-8", "ignore"), MAX_ID_BYTES)


#: Valid JSON text that a JSON column or parser rewrites (NASTY_ARGUMENTS' valid ones).
NASTY_JSON: tuple[str, ...] = tuple(a for a in NASTY_ARGUMENTS if _is_json(a))


@functools.lru_cache(maxsize=32)
def _unique_ids(max_size: int, id_prefix: str) -> st.SearchStrategy[list[str]]:
    """Unique entry ids under ``id_prefix`` (capped), made once a process for each
    (max_size, id_prefix), and unwrapped: :func:`logs` filters it per draw, and a filter on
    Hypothesis's lazy wrapper would build the list strategy again. A strategy made anew is
    validated and its properties (labels, emptiness) worked out anew on its first draw,
    for the same values: made per batch, they cost ``log_store_matches_model`` a fifth of
    its time against the SQLite log store."""
    ids = st.lists(entry_ids.map(lambda i: _capped(id_prefix + i)), max_size=max_size, unique=True)
    return getattr(ids, "wrapped_strategy", ids)


_kinds = st.sampled_from(KINDS)


@st.composite
def logs(
    draw: st.DrawFn, max_size: int = 10, first_parents: Sequence[str] = (), simple: bool = False,
    id_prefix: str = "",
) -> list[Entry]:
    """A valid batch (or whole log): unique ids, each parent ``None``, one of
    ``first_parents`` (ids already in the session) or an earlier entry's, mostly the
    previous one, so paths are long and branches common; a compaction keeps an earlier
    entry, on its path or not. ``simple`` keeps payloads tiny, for tests of the shape;
    ``id_prefix`` starts every id (keeping runs that share a backend apart)."""
    # The filter is a draw's own (it depends on first_parents), its list strategy is not;
    # both are drawn exactly as before, so a seed draws the same logs.
    ids = draw(_unique_ids(max_size, id_prefix).filter(lambda xs: not set(xs) & set(first_parents)))
    out: list[Entry] = []
    for i, entry_id in enumerate(ids):
        earlier = [*first_parents, *ids[:i]]
        if not earlier:
            parent = None
        else:
            parent = draw(st.one_of(
                st.just(earlier[-1]), st.sampled_from(earlier), st.none()
            ))
        kind = draw(_kinds)
        payload = draw(_payload(kind, simple))
        if isinstance(payload, Compaction) and earlier:
            payload = Compaction(payload.summary, draw(st.sampled_from(earlier)))
        out.append(Entry(entry_id, parent, draw(times), kind, payload))  # type: ignore[arg-type]
    return out

# --- item histories (storetest.items) ---------------------------------------------------

#: Session-id suffixes that a key scheme confuses: a store keying ``prefix:id`` and
#: ``prefix:id:messages`` gives session ``x:messages`` the key of ``x``'s items; glob
#: characters match other keys in ``KEYS``/``SCAN``; braces are Redis Cluster hash tags.
KEY_SCHEME_SUFFIXES: tuple[str, ...] = (
    "x", "x:messages", "x:counter", "x:", ":x", "x:*", "x*", "x?", "x[ab]", "xa", "xb",
    "{x}", "{x}y", "x{", "x}", "x/y", "x.y", "x\\", "x'", 'x"',
)


def _nul_free(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(_nul_free(v) for v in value)
    if isinstance(value, dict):
        return all(_nul_free(k) and _nul_free(v) for k, v in value.items())
    return True


#: Numbers JSON keeps and a store must give back with their type: integers past 2^53
#: and 2^64 (a double, a BIGINT or BSON cannot hold them), floats that look whole, -0.0.
NASTY_NUMBERS: tuple[JSONValue, ...] = (
    0, 1, 1.0, -0.0, 0.1, True, False, None, 2**53 + 1, -(2**63), 2**64, 10**30,
    1e300, 5e-324, 1e16, 123456789.125,
)

_ITEM_TEXTS = tuple(t for t in NASTY_TEXTS if "\x00" not in t)


def _text_item(text: str) -> Item:
    return {"role": "user", "content": text}


def _function_call(i: int, arguments: str) -> Item:
    return {"type": "function_call", "call_id": f"call_{i}", "name": "lookup", "arguments": arguments,
            "id": f"fc_{i}", "status": "completed"}


#: One of every item shape the OpenAI Agents SDK keeps, nested content, odd keys and
#: numbers, and the SDK's own unknown types with extra keys; no NUL anywhere (the NUL
#: items are :data:`NUL_ITEMS`, so a backend that refuses NUL is still tested here).
ITEM_CORPUS: tuple[Item, ...] = (
    {"role": "user", "content": "plain text"},
    {"role": "system", "content": ""},
    {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
     "content": [{"type": "output_text", "text": "hi", "annotations": [], "logprobs": []}]},
    {"role": "user", "content": [
        {"type": "input_text", "text": "look at this"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
        {"type": "input_file", "file_data": "JVBERi0xLjQK", "filename": "a b.pdf"}]},
    *(_function_call(i, a) for i, a in enumerate(NASTY_ARGUMENTS)),
    {"type": "function_call_output", "call_id": "call_0", "output": '{"ok": true, "n": 1.0}'},
    {"type": "function_call_output", "call_id": "call_1",
     "output": [{"type": "input_text", "text": "structured output"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}],
     "encrypted_content": None, "content": []},
    {"type": "x-future-item", "payload": {"numbers": list(NASTY_NUMBERS), "deep": {"a": {"b": {"c": [[[]]]}}}},
     "": "empty key", "key with spaces ": 1, "é": "e\u0301", "1": 1, "True": True},
    *(_text_item(text) for text in _ITEM_TEXTS),
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t} for t in _ITEM_TEXTS]},
)

#: NUL where JSON allows it: in text, in raw arguments, in a key.
NUL_ITEMS: tuple[Item, ...] = (
    {"role": "user", "content": "a\x00b"},
    {"role": "user", "content": "\x00"},
    _function_call(0, '{"q": "a\x00b"}'),
    {"type": "x-future-item", "a\x00b": "a NUL in a key"},
)

_json_scalars = st.one_of(
    st.sampled_from(NASTY_NUMBERS), st.none(), st.booleans(), st.integers(),
    st.floats(allow_nan=False, allow_infinity=False), texts,
)
json_values = st.recursive(
    _json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
).filter(_nul_free)
"""JSON values of every type, numbers of every size, adversarial text (no NUL)."""

_item_texts = texts.filter(_nul_free)

items = st.one_of(
    st.sampled_from(ITEM_CORPUS),
    st.builds(lambda role, text: {"role": role, "content": text},
              st.sampled_from(["user", "assistant", "system", "developer"]), _item_texts),
    st.builds(lambda i, args: _function_call(i, args), st.integers(0, 99), tool_arguments.filter(_nul_free)),
    st.builds(lambda out: {"type": "function_call_output", "call_id": "call_1", "output": out}, _item_texts),
    st.builds(lambda extra: {"type": "x-unknown", **extra}, st.dictionaries(_item_texts, json_values, max_size=3)),
)
"""An item the SDK keeps: its message, call, output and unknown shapes, no NUL."""

item_batches = st.lists(items, min_size=1, max_size=5)
"""One ``add_items`` batch."""

_MODEL_ITEMS = (*ITEM_CORPUS[:4], _function_call(0, NASTY_ARGUMENTS[0]), *({"role": "user", "content": f"m{i}"}
                                                                             for i in range(6)))
model_item_batches = st.lists(st.sampled_from(_MODEL_ITEMS), max_size=3)
"""Cheap batches for the item-history state machine (its subject is the order of
operations; the round-trip clauses own the values): drawn from a fixed pool, repeats
and empty batches included."""
