"""The adversarial inputs every clause draws from (Hypothesis strategies).

Each strategy leans on what real stores get wrong: text that a collation folds, a
column truncates or a driver re-encodes, and raw tool-call JSON that a JSON column
would rewrite. Sizes are capped so an example stays cheap against a real database;
the size clause covers big values separately.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from storetest.contract import ROLES, Attachment, Content, Message, Text, ToolCall, ToolResult

__all__ = [
    "NASTY_ARGUMENTS",
    "NASTY_ATTACHMENTS",
    "NASTY_TEXTS",
    "attachments",
    "contents",
    "messages",
    "raw_json",
    "steer_texts",
    "texts",
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
_chars = st.characters(codec="utf-8")

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

attachments = st.one_of(
    st.sampled_from(NASTY_ATTACHMENTS),
    st.builds(
        Attachment,
        st.sampled_from(["image/png", "application/octet-stream", "text/plain; charset=latin-1"]),
        st.binary(max_size=64),
    ),
)

contents: st.SearchStrategy[Content] = st.one_of(
    st.builds(Text, texts),
    st.builds(ToolCall, texts, texts, tool_arguments),
    st.builds(ToolResult, texts, texts, st.booleans()),
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
