"""The input-space model for values: for each protocol and field, the cells a default
check must reach, the values that reach them, and the classifier that says which
cells a value (or a set of ids) reached.

A cell is one point of one dimension of one field:

- *size*: 0, 1 and 2^k - 1, 2^k, 2^k + 1 for k from 3 up to 16 and the field's limit,
  and for a field without one 1 MiB - 1, 1 MiB and 1 MiB + 1 (:data:`LARGE_K`: past
  64 KiB + 1, only the powers of two a known limit sits at), counted in characters and,
  separately, in UTF-8 bytes with a multibyte character last (so a cut one byte short
  splits it); the sizes past 64 KiB + 1 are fixed values sent once per check (four per
  power of two, each up to one character and one byte cell: see :func:`large_values`),
  and transcripts' message text has the 16 MiB cells in the ``ci`` profile only;
- *characters*: a family of characters some layer changes (controls, noncharacters,
  bidi marks, case pairs that fold differently, escapes some layer decodes, ...);
- *id relation*: two ids one key scheme confuses (``x`` and ``x<c>y`` for every ASCII
  punctuation ``c``, escapes and normalizations of each other, leading and trailing
  whitespace of each kind, a separator inside a component of a composite key);
- *JSON*: each RFC 8259 production at its edges, as tool-call arguments;
- *volume*: many steers behind one take, long transcripts, item histories and entry
  logs, batches of one and of thousands.

Each protocol has its fields: transcripts and steers, entry logs (durable sessions),
item histories (the OpenAI Agents SDK's items), chat histories (LangChain messages) and
ADK session services (ids, state keys and values, event text).

The clauses draw their fixed cases from here, so the model is the spec and the
generators follow it; ``scripts/coverage_table.py`` reports which cells a run reached
and ``tests/test_coverage.py`` fails when one is not reached within three seeds.
"""

from __future__ import annotations

import functools
import string
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from storetest.contract import MAX_ID_BYTES, MAX_NAME_BYTES, MAX_SESSION_ID_BYTES

__all__ = [
    "CHARACTER_FAMILIES",
    "CHEAP_LIMIT",
    "ESCAPE_PAIRS",
    "FIELDS",
    "HUGE_PROFILES",
    "JSON_EDGES",
    "LARGE_K",
    "NOT_YET",
    "PUNCTUATION",
    "STEER_QUEUE_BYTES",
    "WHITESPACE",
    "Cell",
    "Coverage",
    "FieldSpec",
    "Related",
    "bytes_value",
    "cells",
    "chars_value",
    "clear_relations",
    "composite_places",
    "family_values",
    "huge_values",
    "id_values",
    "ladder",
    "large_bytes",
    "large_values",
    "related_ids",
    "size_values",
    "spec",
]

#: Fields without a contract limit run their size ladder to 1 MiB.
UNBOUNDED: Final = 2**20
#: Sizes up to this run in the clauses' cheap fixed cases, every field; above it, for a
#: field without a limit, the ladder goes on at the powers of :data:`LARGE_K` with
#: :func:`large_values`: four values per power of two (4.2 MB a field), sent once per check.
CHEAP_LIMIT: Final = 2**16 + 1
#: The powers of two past :data:`CHEAP_LIMIT` the ladder has cells at (2^k - 1, 2^k,
#: 2^k + 1): the ones a known limit sits at (``COLUMN_WIDTHS`` in
#: :mod:`storetest._engine.explain`: 1,048,576, a 1 MiB limit; the 16 MiB ones are
#: :data:`HUGE_K`'s, ``ci`` only). No known limit sits at 2^17, 2^18 or 2^19, and the
#: 1 MiB values find what their cells would: a store cutting at any width between 64 KiB
#: and 1 MiB cuts the 1 MiB values too (and is named by its width), and one splitting a
#: value into chunks of 2^j bytes (j <= 20) gets at 1 MiB a whole number of chunks, one
#: byte short of it and one byte past it.
LARGE_K: Final = (20,)
#: The profiles that also send the 16 MiB cells (transcripts' message text).
HUGE_PROFILES: Final = ("ci", "thorough")
#: The powers of two of the huge cells (2^24 - 1, 2^24, 2^24 + 1: MySQL's MEDIUMTEXT,
#: MongoDB's document limit, MariaDB's default max_allowed_packet).
HUGE_K: Final = 24

PUNCTUATION: Final = string.punctuation

#: Every character Unicode calls White_Space, and the four separators Python's
#: ``str.isspace`` adds (U+001C..U+001F).
WHITESPACE: Final[tuple[str, ...]] = (
    "\t", "\n", "\v", "\f", "\r", "\x1c", "\x1d", "\x1e", "\x1f", " ", "\x85", "\xa0", "\u1680",
    *(chr(c) for c in range(0x2000, 0x200B)), "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
)

#: Character families, each a tuple of pieces: a field reaches the family when every
#: piece has been in one of its values.
CHARACTER_FAMILIES: Final[dict[str, tuple[str, ...]]] = {
    # NUL apart: the item and ADK clauses send it in their NUL clauses only.
    "C0 controls": ("\x00", "".join(chr(c) for c in range(1, 0x20))),
    "C1 controls": ("".join(chr(c) for c in range(0x80, 0xA0)),),
    "DEL": ("\x7f",),
    "noncharacters": ("\ufdd0\ufdef\ufffe\uffff", "\U0001fffe\U0010fffe\U0010ffff"),
    "private use": ("\ue000\uf8ff", "\U000f0000\U0010fffd"),
    "combining sequences": ("e\u0301", "a\u0308\u0304", "\u0301", "n\u0303\u0323"),
    "ZWJ sequences": ("\U0001f469\u200d\U0001f469\u200d\U0001f467", "\U0001f9d1\u200d\U0001f4bb", "a\u200db"),
    "bidi marks": ("\u200e\u200f\u061c", "\u202a\u202b\u202c\u202d\u202e", "\u2066\u2067\u2068\u2069"),
    "fullwidth and compatibility forms": ("\uff21\uff41\uff10", "\ufb01", "\u2460\u216b\u337f", "\uff76"),
    "whitespace": ("".join(WHITESPACE),),
    "case pairs": ("ß", "SS", "ẞ", "İ", "\u0131", "i", "I", "Σ", "\u03c3", "ς", "K", "\u212a"),
    "escapes": ("%41", "%2F", "%00", "\\u0041", "\\x41", "\\n", "\\\\", "&amp;", "&#65;", "&lt;"),
    "line endings": ("\n", "\r\n", "\r", "\x85", "\u2028", "\u2029", "\v", "\f"),
}

#: Pairs of id suffixes that one layer or another turns into each other: a store that
#: decodes, unescapes or normalizes an id on its way merges the two.
ESCAPE_PAIRS: Final[dict[str, tuple[str, str]]] = {
    "percent": ("%41", "A"),
    "percent space": ("a%20b", "a b"),
    "percent slash": ("a%2Fb", "a/b"),
    "plus as space": ("a+b", "a b"),
    "backslash": ("\\x41", "A"),
    "JSON \\u": ("\\u0041", "A"),
    "HTML entity": ("&amp;", "&"),
    "HTML numeric entity": ("&#65;", "A"),
    "NFC and NFD": ("\u00e9", "e\u0301"),
    "NFKC": ("\ufb01", "fi"),
    "fullwidth": ("\uff21", "A"),
    # A key lowercased on its way, a case-insensitive collation or comparison.
    "case": ("Case", "case"),
}

#: JSON text at each RFC 8259 production's edges, kept verbatim as tool-call arguments.
JSON_EDGES: Final[dict[str, tuple[str, ...]]] = {
    "empty text": ("",),
    "bare value": ('"a bare string"', "0", "-0", "true", "false", "null", "[]", "{}"),
    "whitespace between tokens": (" \t\n\r{ \t\n\r\"a\" \t\n\r: \t\n\r[ 1 , 2 ] \t\n\r} \t\n\r", "\r\n[\r\n]\r\n"),
    "whitespace inside strings": ('{"a":" \\t\\n\\r ", "b":"  \u3000\xa0  "}',),
    "deep nesting": ("[" * 512 + "]" * 512, '{"a":' * 200 + "null" + "}" * 200),
    "long and duplicate keys": ('{"' + "k" * 4096 + '":1,"' + "k" * 4096 + '":2}', '{"a":1,"a":2,"a":3}'),
    "int64 edges": ("[9223372036854775807,-9223372036854775808,9223372036854775808,-9223372036854775809]",),
    "float64 edges": ("[1.7976931348623157e308,2.2250738585072014e-308,5e-324,4.9e-324,1e-400,"
                      "9007199254740993,0.30000000000000004]",),
    # No lone-surrogate escape ("\\udc00"): parsed, it is no text a store could keep.
    "escapes in strings": ('["\\u0000","\\ud83d\\ude00","\\/","\\"","\\\\","\\b\\f"]',),
    "numbers in every form": ("[0,-0,0.0,-0.0,1e2,1E+2,1e-2,1.5E-2,10.00]",),
}


@dataclass(frozen=True)
class FieldSpec:
    """One field of one protocol: its byte limit (``None``: 1 MiB) and its dimensions."""

    protocol: str
    name: str
    limit: int | None = None
    chars: bool = True  #: text (sizes in characters and bytes); ``False`` for bytes
    families: bool = True
    ids: bool = False  #: an id: the id relations apply
    json: bool = False  #: raw JSON text: the JSON edges apply
    #: values must be JSON text (an entry's custom data): sized values are JSON strings
    json_text: bool = False
    #: ids that carry each run's unique prefix: the ladder starts at 31 bytes
    prefixed: bool = False
    #: the 16 MiB cells, in the ``ci`` profile only (transcripts' message text)
    huge: bool = False
    #: the smallest size the contract allows (1: an entry id, a custom kind, JSON text)
    min_size: int = 0

    @property
    def size_limit(self) -> int:
        return UNBOUNDED + 1 if self.limit is None else self.limit

    def sizes(self) -> list[int]:
        """The size ladder's cells (bytes; characters too, past 1), to the field's
        limit or to 1 MiB + 1 for a field without one (past 64 KiB + 1, only around the
        powers of :data:`LARGE_K`). An id with the run's prefix
        starts at 31 bytes, since each run's ids start with a unique prefix; JSON text
        and entry ids and kinds at 1 byte (none of them may be empty)."""
        if self.prefixed:
            return [n for n in ladder(self.size_limit, start=5) if n > 1]
        return [n for n in ladder(self.size_limit) if n >= self.min_size and _kept(n)]

    def expensive_cells(self) -> list[Cell]:
        """The 16 MiB cells (``ci`` profile only): 2^24 - 1, 2^24 and 2^24 + 1, in
        characters and in bytes (see :func:`huge_values`)."""
        if not self.huge:
            return []
        return [cell for n in (2**HUGE_K - 1, 2**HUGE_K, 2**HUGE_K + 1) for cell in (
            Cell(self.protocol, self.name, "size in bytes", f"{n:,} bytes", profile="ci"),
            Cell(self.protocol, self.name, "size in characters", f"{n:,} characters", profile="ci"))]


FIELDS: Final[tuple[FieldSpec, ...]] = (
    FieldSpec("transcripts", "message text", huge=True),
    FieldSpec("transcripts", "tool name", MAX_NAME_BYTES),
    FieldSpec("transcripts", "call id", MAX_ID_BYTES),
    FieldSpec("transcripts", "arguments", json=True),
    FieldSpec("transcripts", "tool result"),
    FieldSpec("transcripts", "media type", MAX_NAME_BYTES),
    FieldSpec("transcripts", "attachment data", chars=False, families=False),
    FieldSpec("transcripts", "steer text"),
    FieldSpec("transcripts", "session id", MAX_SESSION_ID_BYTES, ids=True, prefixed=True),
    FieldSpec("entry logs", "session id", MAX_SESSION_ID_BYTES, ids=True, prefixed=True),
    FieldSpec("entry logs", "entry id", MAX_ID_BYTES, ids=True, min_size=1),
    FieldSpec("entry logs", "message text"),
    FieldSpec("entry logs", "custom kind", MAX_NAME_BYTES, min_size=1),
    FieldSpec("entry logs", "custom data", families=False, json=True, json_text=True, min_size=1),
    # No id limit in the item protocol: the ladder stops at the transcripts' 512 bytes,
    # and an id refused cleanly is a limit the report lists.
    FieldSpec("item histories", "session id", MAX_SESSION_ID_BYTES, ids=True, prefixed=True),
    FieldSpec("item histories", "message content"),
    FieldSpec("item histories", "arguments", json=True),
    FieldSpec("chat histories", "session id", MAX_SESSION_ID_BYTES, ids=True, prefixed=True),
    FieldSpec("chat histories", "message content"),
    FieldSpec("chat histories", "tool call arguments", json=True),
    FieldSpec("adk", "session id", MAX_SESSION_ID_BYTES, ids=True, prefixed=True),
    FieldSpec("adk", "event text"),
    FieldSpec("adk", "state key", ids=True),
    FieldSpec("adk", "state value"),
)

#: Protocols and fields the model does not cover yet (their clauses keep their own
#: fixed cases and strategies, unmeasured by the coverage report).
NOT_YET: Final[tuple[str, ...]] = (
    "item fields other than message content and arguments (call ids, names, reasoning items)",
    "LangChain message fields other than content and raw tool-call arguments (ids, names, metadata)",
    "ADK app and user ids past the composite-key relations, function-call names and arguments",
    "entry creation times (the log clauses' own fixed cases)",
    "LangGraph checkpoints (channel values take the character families and the size ladder from here, "
    "unmeasured; thread ids and namespaces their own separator cases)",
)


def spec(protocol: str, name: str) -> FieldSpec:
    """The field ``name`` of ``protocol``."""
    return next(s for s in FIELDS if s.protocol == protocol and s.name == name)

#: Bytes the 1,001 queued steers of ``steers_are_taken_in_order_exactly_once`` total.
STEER_QUEUE_BYTES: Final = 2**20


@dataclass(frozen=True)
class Cell:
    protocol: str
    field: str
    dimension: str
    name: str
    #: reached by fixed cases on every seed (all cells of this model are)
    deterministic: bool = True
    #: the lightest profile that must reach it ("ci": the 16 MiB cells)
    profile: str = "fast"

    def __str__(self) -> str:
        return f"{self.protocol} / {self.field} / {self.dimension} / {self.name}"


def _kept(n: int) -> bool:
    """Whether size ``n`` is a cell: up to :data:`CHEAP_LIMIT`, or next to a power of
    :data:`LARGE_K`."""
    return n <= CHEAP_LIMIT or any(abs(n - 2**k) <= 1 for k in LARGE_K)


def ladder(limit: int, start: int = 3) -> list[int]:
    """0, 1, and 2^k - 1, 2^k, 2^k + 1 for k from ``start`` while not past ``limit``."""
    sizes = [0, 1]
    k = start
    while 2**k - 1 <= limit:
        sizes += [n for n in (2**k - 1, 2**k, 2**k + 1) if n <= limit]
        k += 1
    return sizes


#: 11 bytes in 5 characters: more than twice as many bytes as characters, so for any
#: byte width B some ladder size n has n <= B characters but more than B bytes (a column
#: chosen by character count that cuts at bytes is crossed).
_MIX = "é🙂Ab中"


def chars_value(n: int, byte_limit: int | None = None) -> str:
    """``n`` characters, mostly multibyte (so the bytes run ahead of the characters),
    plain ASCII when that would pass ``byte_limit``."""
    text = (_MIX * (n // len(_MIX) + 1))[:n]
    if byte_limit is not None and len(text.encode()) > byte_limit:
        return "a" * n
    return text


def bytes_value(n: int) -> str:
    """``n`` bytes of UTF-8, ASCII between a 2-byte character first and a multibyte
    character last (4 bytes when it fits), so a cut one byte short of ``n`` splits the
    last, and a cut anywhere reads as a cut (the first character stays), not as
    non-ASCII characters dropped."""
    for last in ("🙂", "中", "é"):
        width = len(last.encode())
        if n >= width + 2:
            return "é" + "b" * (n - width - 2) + last
        if n >= width:
            return "b" * (n - width) + last
    return "b" * n


def _json_string(value: str) -> str:
    return f'"{value}"'


def size_values(spec: FieldSpec, up_to: int = CHEAP_LIMIT) -> list[str]:
    """The field's cheap size cells as values: every ladder size in characters and in
    bytes, up to ``up_to``. JSON text (``json_text``) is a JSON string of that size, its
    multibyte character just before the closing quote."""
    sizes = [n for n in spec.sizes() if n <= up_to]
    if spec.json_text:
        out = [_json_string(bytes_value(n - 2)) if n >= 2 else "1" for n in sizes]
        return out + [_json_string(chars_value(n - 2, None if spec.limit is None else spec.limit - 2))
                      for n in sizes if n > 2]
    out = [bytes_value(n) for n in sizes]
    if spec.chars:
        out += [chars_value(n, spec.limit) for n in sizes if n > 1]
    return out


def _sized(chars: int, lead: bool, json_text: bool) -> str:
    """``chars`` characters of ASCII ending in a 2-byte character (and beginning with
    one with ``lead``), so ``chars + 1`` (``+ 2``) bytes; a JSON string with ``json_text``."""
    inner = chars - 2 if json_text else chars
    text = ("é" if lead else "") + "c" * (inner - 1 - lead) + "é"
    return _json_string(text) if json_text else text


def _triple(n: int, json_text: bool = False) -> list[str]:
    """Four values reaching the characters n - 1, n, n + 1 and the bytes n - 1, n, n + 1
    (n = 2^k), in this order: n - 3 characters in n - 1 bytes and n + 1 characters (both
    beginning with a 2-byte character), then n - 1 characters in n bytes and n
    characters in n + 1 bytes. Whatever byte width W in n - 2 .. n + 2 a store cuts at,
    the first value it damages begins with a 2-byte character, so the cut reads as a
    cut, not as "non-ASCII dropped"."""
    return [_sized(n - 3, True, json_text), _sized(n + 1, True, json_text),
            _sized(n - 1, False, json_text), _sized(n, False, json_text)]


def large_values(spec: FieldSpec) -> list[str]:
    """The field's size cells past :data:`CHEAP_LIMIT` (fields without a limit: one
    short of 1 MiB, 1 MiB and one past it, around the powers of :data:`LARGE_K`), four
    values per power of two, each reaching up to one character and one byte cell, each
    byte cell with its multibyte character last (see :func:`_triple`). JSON text is a
    JSON string of those sizes. Sent once per check (4.2 MB a field).

    Past 64 KiB + 1 the ladder stands only where a known limit does (1 MiB; 16 MiB in
    the ``ci`` profile): a store that cuts at any width between 64 KiB and 1 MiB cuts
    these values too, and is named by its width; one that splits a value into chunks of
    2^j bytes (j up to 20) gets here a whole number of chunks, one byte short of it and
    one byte past it. 2^17, 2^18 and 2^19 have no cells."""
    return [v for n in spec.sizes() if n > CHEAP_LIMIT and n & (n - 1) == 0 for v in _large_triple(n, spec.json_text)]


@functools.lru_cache(maxsize=4)
def _large_triple(n: int, json_text: bool) -> tuple[str, ...]:
    """:func:`_triple` of a size past :data:`CHEAP_LIMIT`, made once a process: every
    field without a limit has the same four values (4.2 MB; JSON text four more), and
    a check sends them through several fields and clauses. The 16 MiB ones are not kept."""
    return tuple(_triple(n, json_text))


def large_bytes(spec: FieldSpec) -> list[bytes]:
    """A bytes field's (attachment data) size cells past :data:`CHEAP_LIMIT`."""
    return [bytes(range(256)) * (n // 256) + bytes(n % 256) for n in spec.sizes() if n > CHEAP_LIMIT]


def huge_values() -> list[str]:
    """The 16 MiB cells of transcripts' message text (``ci`` profile only), four
    values as :func:`large_values` makes them (67 MB)."""
    return _triple(2**HUGE_K)


def id_values(prefix: str, protocol: str = "transcripts") -> list[str]:
    """Session ids at the id's size cells: ``prefix`` filled to each size in bytes
    (a multibyte character last) and in characters (within the byte limit)."""
    found = spec(protocol, "session id")
    used = len(prefix.encode())
    out = []
    for n in found.sizes():
        if n - used >= 4:
            out.append(prefix + bytes_value(n - used))
            out.append(prefix + chars_value(n - len(prefix), found.size_limit - used))
    return out


def family_values(nul: bool = True) -> list[str]:
    """Every piece of every character family, each a value on its own; without
    ``nul``, not NUL (a protocol whose clauses send NUL in a clause of its own)."""
    return [piece for pieces in CHARACTER_FAMILIES.values() for piece in pieces if nul or "\x00" not in piece]


def related_ids(prefix: str) -> list[str]:
    """Session ids in every relation of the model, all under ``prefix``: ``x`` and
    ``x<c>y`` for every ASCII punctuation ``c``; both sides of every escape pair;
    ``w`` with each whitespace leading (before the prefix) and trailing; each character family's pieces."""
    x = f"{prefix}x"
    out = [x, *(f"{x}{c}y" for c in PUNCTUATION)]
    for encoded, decoded in ESCAPE_PAIRS.values():
        out += [prefix + encoded, prefix + decoded]
    w = f"{prefix}w"
    out += [w, *(f"{space}{w}" for space in WHITESPACE), *(f"{w}{space}" for space in WHITESPACE)]
    out += [prefix + piece for piece in family_values()]
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Related:
    """Two ids in one relation of the model: a clear of ``cleared`` must leave ``kept``
    as it was. ``relation`` is the cell's name (``x and x/y``, ``percent``, ``case``,
    ``trailing U+0009``)."""

    cleared: str
    kept: str
    relation: str

    def describe(self, verb: str = "clear") -> str:
        """Why a clear (``verb``: a delete) of ``cleared`` would reach ``kept``, for the
        store's author."""
        if self.relation.startswith("x and x"):
            c = self.relation[len("x and x")]
            return (f"{self.kept!r} is {self.cleared!r} followed by {c!r}: a {verb} by key pattern or prefix "
                    f"(SCAN MATCH id*, LIKE 'id%', startswith) reaches every id under {c!r}")
        if self.relation in ESCAPE_PAIRS:
            encoded, decoded = ESCAPE_PAIRS[self.relation]
            how = ("lowercases the id, or compares ids case-insensitively," if self.relation == "case"
                   else "decodes or normalizes the id on its way")
            return (f"the two ids are the {self.relation} pair {encoded!r} / {decoded!r}: a {verb} that {how} "
                    "reaches both")
        where, _, code = self.relation.partition(" ")
        return (f"{self.kept!r} is {self.cleared!r} with {code} {where}: an id stripped of whitespace, or "
                "matched by prefix")


def clear_relations(prefix: str) -> list[Related]:
    """Every relation of the model (not the character families), one side to clear and
    one to keep, all under ``prefix``: ``x`` cleared, ``x<c>y`` kept for every ASCII
    punctuation ``c``; the first side of every escape pair cleared (``%41``, ``Case``),
    the second kept (``A``, ``case``); ``w`` cleared, ``w`` with each whitespace leading
    and trailing kept. No cleared id is a kept one."""
    x, w = f"{prefix}x", f"{prefix}w"
    out = [Related(x, f"{x}{c}y", f"x and x{c}y") for c in PUNCTUATION]
    out += [Related(prefix + encoded, prefix + decoded, kind) for kind, (encoded, decoded) in ESCAPE_PAIRS.items()]
    for space in WHITESPACE:
        out += [Related(w, f"{space}{w}", f"leading U+{ord(space):04X}"),
                Related(w, f"{w}{space}", f"trailing U+{ord(space):04X}")]
    return out


def composite_places(app: str, user: str, session: str) -> list[tuple[str, str, str]]:
    """(app, user, session) triples that join to one key under each separator ``c``
    when a component holds ``c``: app ``a``/user ``b<c>u`` beside app ``a<c>b``/user
    ``u``; user ``u``/session ``s<c>v`` beside user ``u<c>s``/session ``v``."""
    out = []
    for c in PUNCTUATION:
        out += [(app, f"{user}{c}u", session), (f"{app}{c}{user}", "u", session),
                (app, user, f"{session}{c}v"), (app, f"{user}{c}{session}", "v")]
    return list(dict.fromkeys(out))


# --- the cells, and what reaches them ---------------------------------------------------


#: The volume cells, by protocol: (field, name).
VOLUMES: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "transcripts": (("steers", "1,001 steers behind one take"), ("steers", "1 MiB of steers behind one take"),
                    ("messages", "2,000 messages in one transcript"), ("messages", "2,001 messages in one transcript")),
    "entry logs": (("entries", "a batch of 1 entry"), ("entries", "a batch of 2,000 entries"),
                   ("entries", "2,001 entries in one log")),
    "item histories": (("items", "a batch of 1 item"), ("items", "a batch of 2,000 items"),
                       ("items", "2,000 items in one history")),
    "chat histories": (("messages", "a batch of 1 message"), ("messages", "a batch of 2,000 messages"),
                       ("messages", "2,000 messages in one history")),
}


def cells(profile: str | None = None) -> list[Cell]:
    """Every cell of the model, field by field; with ``profile``, the cells that
    profile must reach (the 16 MiB ones only in :data:`HUGE_PROFILES`)."""
    out: list[Cell] = []
    for spec in FIELDS:
        p, f = spec.protocol, spec.name
        for n in spec.sizes():
            out.append(Cell(p, f, "size in bytes", f"{n:,} bytes"))
            if spec.chars and n > 1:
                out.append(Cell(p, f, "size in characters", f"{n:,} characters"))
        out += spec.expensive_cells()
        if spec.families:
            out += [Cell(p, f, "characters", family) for family in CHARACTER_FAMILIES]
        if spec.json:
            out += [Cell(p, f, "JSON", production) for production, texts in JSON_EDGES.items()
                    if not spec.json_text or all(texts)]  # JSON text is never empty
        if spec.ids:
            out += [Cell(p, f, "prefix under a separator", f"x and x{c}y") for c in PUNCTUATION]
            out += [Cell(p, f, "escape or normalization", kind) for kind in ESCAPE_PAIRS]
            out += [Cell(p, f, "whitespace", f"{where} U+{ord(w):04X}") for w in WHITESPACE
                    for where in ("leading", "trailing")]
    for protocol, volumes in VOLUMES.items():
        out += [Cell(protocol, f, "volume", name) for f, name in volumes]
    out += [Cell("adk", "app/user/session", "separator inside a component", f"{c} inside {component}")
            for c in PUNCTUATION for component in ("app", "user", "session")]
    if profile is not None and profile not in HUGE_PROFILES:
        out = [c for c in out if c.profile != "ci"]
    return out


def _size_cells(spec: FieldSpec, value: str | bytes) -> Iterator[str]:
    if isinstance(value, bytes):
        yield f"{len(value):,} bytes"
        return
    raw = value.encode("utf-8", "surrogatepass")
    last = value[-2] if spec.json_text and value.endswith('"') and len(value) > 2 else value[-1:]
    if len(raw) < 2 or (len(value) < len(raw) and last > "\x7f"):
        yield f"{len(raw):,} bytes"
    if spec.chars:
        yield f"{len(value):,} characters"


@dataclass
class Coverage:
    """What one or more runs sent through an instrumented store, cell by cell."""

    counts: Counter[Cell] = field(default_factory=Counter)
    _ids: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    _places: set[tuple[str, str, str]] = field(default_factory=set)
    _seen_pieces: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._specs = {(s.protocol, s.name): s for s in FIELDS}
        self._cells = {(c.protocol, c.field, c.name): c for c in cells()}

    def _hit(self, protocol: str, field_name: str, name: str) -> None:
        cell = self._cells.get((protocol, field_name, name))
        if cell is not None:
            self.counts[cell] += 1

    def value(self, protocol: str, field_name: str, value: str | bytes) -> None:
        """One value of one field went into the store."""
        spec = self._specs[protocol, field_name]
        for name in _size_cells(spec, value):
            self._hit(protocol, field_name, name)
        if isinstance(value, bytes):
            return
        if spec.json:
            for production, edges in JSON_EDGES.items():
                if value in edges:
                    self._hit(protocol, field_name, production)
        if spec.ids:
            self._ids.setdefault((protocol, field_name), set()).add(value)
        if spec.families and len(value) <= CHEAP_LIMIT:
            seen = self._seen_pieces.setdefault((protocol, field_name), set())
            for family, pieces in CHARACTER_FAMILIES.items():
                for piece in pieces:
                    if piece in value:
                        seen.add(piece)
                if all(piece in seen for piece in pieces) and any(piece in value for piece in pieces):
                    self._hit(protocol, field_name, family)

    def volume(self, protocol: str, field_name: str, name: str) -> None:
        """A volume cell (see :data:`VOLUMES`) was reached."""
        self._hit(protocol, field_name, name)

    def batch(self, protocol: str, unit: str, field_name: str, size: int, total: int) -> None:
        """A batch of ``size`` went in, making ``total`` in the session (``unit``: the
        plural, ``entries``; the field the volume cells are under)."""
        one = {"entries": "entry"}.get(unit, unit.removesuffix("s"))
        if size in (1, 2000):
            self._hit(protocol, field_name, f"a batch of {size:,} {unit if size > 1 else one}")
        for n in (2000, 2001):
            if total >= n:
                for where in ("history", "log"):
                    self._hit(protocol, field_name, f"{n:,} {unit} in one {where}")

    def take(self, protocol: str, taken: list[str]) -> None:
        """One take returned ``taken``."""
        if len(taken) >= 1001:
            self._hit(protocol, "steers", "1,001 steers behind one take")
        if len(taken) > 1 and sum(len(s.encode()) for s in taken) >= 2**20:
            self._hit(protocol, "steers", "1 MiB of steers behind one take")

    def transcript(self, protocol: str, length: int) -> None:
        if length in (2000, 2001):
            self._hit(protocol, "messages", f"{length:,} messages in one transcript")

    def place(self, app: str, user: str, session: str) -> None:
        self._places.add((app, user, session))

    def finish(self) -> Counter[Cell]:
        """Count the relations between the ids seen, then every cell's hits."""
        for (protocol, field_name), ids in self._ids.items():
            self._relations(protocol, field_name, ids)
        self._composites()
        return self.counts

    def _relations(self, protocol: str, field_name: str, ids: set[str]) -> None:
        whitespace = set(WHITESPACE)
        for b in ids:
            for i, c in enumerate(b):
                if c in PUNCTUATION and i + 1 < len(b) and b[:i] in ids:
                    self._hit(protocol, field_name, f"x and x{c}y")
            for kind, (encoded, decoded) in ESCAPE_PAIRS.items():
                if b.endswith(encoded) and b[: len(b) - len(encoded)] + decoded in ids:
                    self._hit(protocol, field_name, kind)
            if len(b) > 1 and b[-1] in whitespace and b[:-1] in ids:
                self._hit(protocol, field_name, f"trailing U+{ord(b[-1]):04X}")
            if len(b) > 1 and b[0] in whitespace and b[1:] in ids:
                self._hit(protocol, field_name, f"leading U+{ord(b[0]):04X}")

    def _composites(self) -> None:
        for c in PUNCTUATION:
            joined: dict[str, list[tuple[str, str, str]]] = {}
            for place in self._places:
                if any(c in part for part in place):
                    joined.setdefault(c.join(place), []).append(place)
            for group in joined.values():
                if len(group) < 2:
                    continue
                for place in group:
                    for component, part in zip(("app", "user", "session"), place, strict=True):
                        if c in part and any(other[("app", "user", "session").index(component)] != part
                                             for other in group):
                            self._hit("adk", "app/user/session", f"{c} inside {component}")

