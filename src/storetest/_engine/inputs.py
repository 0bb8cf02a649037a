"""The input-space model for values: for each protocol and field, the cells a default
check must reach, the values that reach them, and the classifier that says which
cells a value (or a set of ids) reached.

A cell is one point of one dimension of one field:

- *size*: 0, 1 and 2^k - 1, 2^k, 2^k + 1 for k from 3 up to the field's limit (64 KiB
  + 1 for a field without one), counted in characters and, separately, in UTF-8 bytes
  with a multibyte character last (so a cut one byte short splits it); past that, for
  message text, one value per power of two to 1 MiB, run once per check;
- *characters*: a family of characters some layer changes (controls, noncharacters,
  bidi marks, case pairs that fold differently, escapes some layer decodes, ...);
- *id relation*: two ids one key scheme confuses (``x`` and ``x<c>y`` for every ASCII
  punctuation ``c``, escapes and normalizations of each other, leading and trailing
  whitespace of each kind, a separator inside a component of a composite key);
- *JSON*: each RFC 8259 production at its edges, as tool-call arguments;
- *volume*: many steers behind one take, long transcripts.

The clauses draw their fixed cases from here, so the model is the spec and the
generators follow it; ``scripts/coverage_table.py`` reports which cells a run reached
and ``tests/test_coverage.py`` fails when one is not reached within three seeds.
"""

from __future__ import annotations

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
    "JSON_EDGES",
    "NOT_YET",
    "PUNCTUATION",
    "STEER_QUEUE_BYTES",
    "WHITESPACE",
    "Cell",
    "Coverage",
    "FieldSpec",
    "bytes_value",
    "cells",
    "chars_value",
    "composite_places",
    "expensive_sizes",
    "family_values",
    "id_values",
    "ladder",
    "related_ids",
    "size_values",
]

#: Fields without a contract limit run their size ladder to 1 MiB.
UNBOUNDED: Final = 2**20
#: Sizes up to this run in the clauses' cheap fixed cases, every field; above it only
#: message text, one value per power of two, once per check in
#: ``large_values_round_trip`` (the expensive cells: four values of 1.9 MB in all, where
#: the full triples to 1 MiB would be sixteen of 6.8 MB).
CHEAP_LIMIT: Final = 2**16 + 1

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
    "C0 controls": ("".join(chr(c) for c in range(0x20)),),
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
    ids: bool = False  #: a session id: the id relations apply
    json: bool = False  #: raw JSON text: the JSON edges apply
    #: how many size cells run past CHEAP_LIMIT (message text only, see CHEAP_LIMIT)
    expensive: bool = False

    @property
    def size_limit(self) -> int:
        return UNBOUNDED if self.limit is None else self.limit

    def sizes(self) -> list[int]:
        """The size ladder's cells (bytes; characters too, past 1), to the field's
        limit or to :data:`CHEAP_LIMIT` for a field without one. A session id starts at
        31 bytes, since each run's ids start with a unique prefix."""
        top = self.limit or CHEAP_LIMIT
        if self.ids:
            return [n for n in ladder(top, start=5) if n > 1]
        return ladder(top)

    def expensive_cells(self) -> list[Cell]:
        """Past :data:`CHEAP_LIMIT`, for message text only: ``2^k + 1`` bytes and ``2^k``
        characters for k from 17 to 20 (one value each, see :func:`expensive_sizes`)."""
        if not self.expensive:
            return []
        return [cell for k in range(17, 21) for cell in (
            Cell(self.protocol, self.name, "size in bytes", f"{2**k + 1:,} bytes"),
            Cell(self.protocol, self.name, "size in characters", f"{2**k:,} characters"))]


FIELDS: Final[tuple[FieldSpec, ...]] = (
    FieldSpec("transcripts", "message text", expensive=True),
    FieldSpec("transcripts", "tool name", MAX_NAME_BYTES),
    FieldSpec("transcripts", "call id", MAX_ID_BYTES),
    FieldSpec("transcripts", "arguments", json=True),
    FieldSpec("transcripts", "tool result"),
    FieldSpec("transcripts", "media type", MAX_NAME_BYTES),
    FieldSpec("transcripts", "attachment data", chars=False, families=False),
    FieldSpec("transcripts", "steer text"),
    FieldSpec("transcripts", "session id", MAX_SESSION_ID_BYTES, ids=True),
)

#: Protocols and fields the model does not cover yet (their clauses keep their own
#: fixed cases and strategies, unmeasured by the coverage report).
NOT_YET: Final[tuple[str, ...]] = (
    "entry logs (entry ids, kinds, custom data)",
    "item histories (item and message fields, batches of 1 to N)",
    "chat histories",
    "ADK state keys and event fields (ADK ids only as composite-key relations)",
    "LangGraph checkpoints (channel values take the character families and the size ladder from here, "
    "unmeasured; thread ids and namespaces their own separator cases)",
    "the 16 MiB size cells of the ci profile",
)

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

    def __str__(self) -> str:
        return f"{self.protocol} / {self.field} / {self.dimension} / {self.name}"


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
    """``n`` bytes of UTF-8, ASCII with a multibyte character last (4 bytes when it
    fits), so a cut one byte short of ``n`` splits it."""
    for last in ("🙂", "中", "é"):
        width = len(last.encode())
        if n >= width:
            return "b" * (n - width) + last
    return "b" * n


def size_values(spec: FieldSpec, up_to: int = CHEAP_LIMIT) -> list[str]:
    """The field's cheap size cells as values: every ladder size in characters and in
    bytes, up to ``up_to``."""
    sizes = [n for n in spec.sizes() if n <= up_to]
    out = [bytes_value(n) for n in sizes]
    if spec.chars:
        out += [chars_value(n, spec.limit) for n in sizes if n > 1]
    return out


def expensive_sizes() -> list[str]:
    """Message text past :data:`CHEAP_LIMIT`: for each k from 17 to 20, ``2^k + 1``
    bytes of ASCII ending in a 2-byte character, which is ``2^k`` characters: one value
    per power of two crosses every cut at or below ``2^k`` in either unit, at the cost
    of one value (the ladder's full triples stop at 64 KiB + 1, see :func:`FieldSpec.sizes`)."""
    return ["c" * (2**k - 1) + "é" for k in range(17, 21)]


def id_values(prefix: str) -> list[str]:
    """Session ids at the id's size cells: ``prefix`` filled to each size in bytes
    (a multibyte character last) and in characters (within the byte limit)."""
    spec = next(s for s in FIELDS if s.ids)
    used = len(prefix.encode())
    out = []
    for n in spec.sizes():
        if n - used >= 4:
            out.append(prefix + bytes_value(n - used))
            out.append(prefix + chars_value(n - len(prefix), spec.size_limit - used))
    return out


def family_values() -> list[str]:
    """Every piece of every character family, each a value on its own."""
    return [piece for pieces in CHARACTER_FAMILIES.values() for piece in pieces]


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


def cells() -> list[Cell]:
    """Every cell of the model, field by field."""
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
            out += [Cell(p, f, "JSON", production) for production in JSON_EDGES]
        if spec.ids:
            out += [Cell(p, f, "prefix under a separator", f"x and x{c}y") for c in PUNCTUATION]
            out += [Cell(p, f, "escape or normalization", kind) for kind in ESCAPE_PAIRS]
            out += [Cell(p, f, "whitespace", f"{where} U+{ord(w):04X}") for w in WHITESPACE
                    for where in ("leading", "trailing")]
    out += [Cell("transcripts", "steers", "volume", "1,001 steers behind one take"),
            Cell("transcripts", "steers", "volume", "1 MiB of steers behind one take"),
            Cell("transcripts", "messages", "volume", "2,000 messages in one transcript"),
            Cell("transcripts", "messages", "volume", "2,001 messages in one transcript")]
    out += [Cell("adk", "app/user/session", "separator inside a component", f"{c} inside {component}")
            for c in PUNCTUATION for component in ("app", "user", "session")]
    return out


def _size_cells(spec: FieldSpec, value: str | bytes) -> Iterator[str]:
    if isinstance(value, bytes):
        yield f"{len(value):,} bytes"
        return
    raw = value.encode("utf-8", "surrogatepass")
    if len(raw) < 2 or (len(value) < len(raw) and ord(value[-1]) > 0x7F):
        yield f"{len(raw):,} bytes"
    if spec.chars:
        yield f"{len(value):,} characters"


@dataclass
class Coverage:
    """What one or more runs sent through an instrumented store, cell by cell."""

    counts: Counter[Cell] = field(default_factory=Counter)
    _ids: dict[str, set[str]] = field(default_factory=dict)
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
            self._ids.setdefault(protocol, set()).add(value)
        if spec.families and len(value) <= CHEAP_LIMIT:
            seen = self._seen_pieces.setdefault((protocol, field_name), set())
            for family, pieces in CHARACTER_FAMILIES.items():
                for piece in pieces:
                    if piece in value:
                        seen.add(piece)
                if all(piece in seen for piece in pieces) and any(piece in value for piece in pieces):
                    self._hit(protocol, field_name, family)

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
        for protocol, ids in self._ids.items():
            self._relations(protocol, ids)
        self._composites()
        return self.counts

    def _relations(self, protocol: str, ids: set[str]) -> None:
        field_name = next(s.name for s in FIELDS if s.protocol == protocol and s.ids)
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

