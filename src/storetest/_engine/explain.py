"""Explain a value that came back different: try known transforms against (sent, got).

A store that damages a value almost always does it through a layer that does one
known thing to text: a collation strips trailing spaces, a driver decodes with the
wrong charset, a codec re-serializes JSON, a column cuts at a width. So instead of
matching the bugs seen before, :func:`explain_text` applies each transform of
:data:`TRANSFORMS` to what was sent, and the first whose result is what came back is
the diagnosis, in the words a store author acts on. Pairs of transforms are tried
too, on short values (a charset round trip after a strip). A cut at a count is found
by measure, named in characters and in UTF-8 bytes, and said to be a common column
width when it is one. When nothing explains it, :func:`minimal_diff` gives the first
differing position in characters and bytes, a window of both, and both lengths.

Every transform is a plain ``str -> str`` function: adding one is a line in
:data:`TRANSFORMS`, and ``scripts/contract_page.py`` lists them in docs/contract.md.
"""

from __future__ import annotations

import codecs
import functools
import html
import json
import re
import unicodedata
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "COLUMN_WIDTHS",
    "RAISED_IN_STORE",
    "SHAPES",
    "TRANSFORMS",
    "Transform",
    "explain_text",
    "minimal_diff",
    "names_a_cause",
    "truncation",
]


@dataclass(frozen=True)
class Transform:
    """One thing a layer between the store's caller and its disk does to text."""

    family: str  #: what kind of layer (normalization, charset, escapes...)
    line: str  #: the diagnosis, as the store author reads it
    apply: Callable[[str], str]  #: what the layer makes of a value
    #: What it makes is never longer ("<="), never shorter (">=") or always as long
    #: ("=") as what it is given; "" when it can go either way. A value that came back
    #: at a length the transform cannot make is not tried (a MiB value costs up to
    #: 100 ms a transform; ``tests/test_explain.py`` holds each transform to its claim).
    length: str = ""

    def could_make(self, sent: str, got: str) -> bool:
        """Whether ``got``'s length is one this transform can make from ``sent``."""
        if self.length == "=":
            return len(got) == len(sent)
        if self.length == "<=":
            return len(got) <= len(sent)
        if self.length == ">=":
            return len(got) >= len(sent)
        return True


#: Each C1 control (U+0080-U+009F) as the cp1252 character at its byte.
_CP1252_C1: Final = {c: bytes([c]).decode("cp1252", "replace") for c in range(0x80, 0xA0)}


def _cp1252_c1(s: str) -> str:
    # A latin1 column read back as Windows-1252 (MySQL's "latin1" is cp1252): the C1
    # controls U+0080-U+009F come back as the cp1252 characters at those bytes.
    return s.translate(_CP1252_C1) if re.search("[\x80-\x9f]", s) else s


#: The characters a charset cannot hold, as a pattern (the slow way, per character, for others).
_OUTSIDE: Final = {"latin-1": re.compile("[^\x00-\xff]"), "ascii": re.compile("[^\x00-\x7f]")}


def _utf8_as(charset: str) -> Callable[[str], str]:
    def mojibake(s: str) -> str:
        return s.encode("utf-8", "surrogatepass").decode(charset, "replace")
    return mojibake


def _into(charset: str, replacement: str = "?") -> Callable[[str], str]:
    def lossy(s: str) -> str:
        if charset in _OUTSIDE:
            return _OUTSIDE[charset].sub(replacement, s)
        return "".join(c if c.encode(charset, "ignore") else replacement for c in s)
    return lossy


def _utf8mb3(s: str) -> str:
    return re.sub("[\U00010000-\U0010FFFF]", "?", s)


# A backslash and the character after it; unicode_escape warns (DeprecationWarning) on
# an escape it does not know and keeps it as it is, so those are kept by hand.
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_KNOWN_ESCAPES = frozenset("\\'\"abfnrtv01234567xNuU\n")


def backslash_decoded(s: str) -> str:
    """``s`` with its backslash escapes decoded as Python reads them (``\\n``, ``\\u00e9``),
    unknown ones (``\\d``) kept; ``s`` itself where an escape is malformed."""
    if "\\" not in s:
        return s
    known = _ESCAPE.sub(lambda m: m[0] if m[1] in _KNOWN_ESCAPES else "\\" + m[0], s)
    try:
        return codecs.decode(known.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return s


def _json_unwrapped(s: str) -> str:
    try:
        value = json.loads(s)
    except ValueError:
        return s
    return value if isinstance(value, str) else s


def _json_string_body(s: str) -> str:
    return json.dumps(s)[1:-1]


def _collapse(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def _empty_as(value: str) -> Callable[[str], str]:
    def mapped(s: str) -> str:
        return value if s == "" else s
    return mapped


def _nul_cut(s: str) -> str:
    return s.split("\x00", 1)[0]


#: The catalogue, tried in order; the first transform that explains a difference wins,
#: so the more specific come first (NUL dropped before "characters removed").
TRANSFORMS: Final[tuple[Transform, ...]] = (
    Transform("NUL", "NUL lost: every \\x00 character was dropped", lambda s: s.replace("\x00", ""), "<="),
    Transform("NUL", "truncated at the first NUL (a C-string boundary)", _nul_cut, "<="),
    Transform("whitespace", "trailing whitespace stripped (a PAD SPACE comparison or a strip())", str.rstrip, "<="),
    Transform("whitespace", "leading whitespace stripped (an lstrip())", str.lstrip, "<="),
    Transform("whitespace", "surrounding whitespace stripped", str.strip, "<="),
    Transform("whitespace", "runs of whitespace collapsed into one space", _collapse, "<="),
    Transform("line endings", "CRLF turned into LF (a text-mode or newline-normalizing layer)",
              lambda s: s.replace("\r\n", "\n"), "<="),
    Transform("line endings", "lone CR turned into LF (universal newlines)",
              lambda s: s.replace("\r\n", "\n").replace("\r", "\n"), "<="),
    Transform("line endings", "LF turned into CRLF (a text-mode write on Windows)",
              lambda s: s.replace("\r\n", "\n").replace("\n", "\r\n"), ">="),
    # A decomposition or a case mapping takes every character to one or more (ß to SS).
    *(Transform("Unicode normalization", f"Unicode normalized to {form}",
                lambda s, form=form: unicodedata.normalize(form, s), "" if form in ("NFC", "NFKC") else ">=")  # type: ignore[misc]
      for form in ("NFC", "NFD", "NFKC", "NFKD")),
    Transform("case", "case changed: lowered", str.lower, ">="),
    Transform("case", "case changed: uppered", str.upper, ">="),
    Transform("case", "case changed: case-folded (ß became ss, final sigma became sigma)", str.casefold, ">="),
    Transform("empty", "the empty string came back as '{}' (an empty value mapped to an empty JSON object)",
              _empty_as("{}"), ">="),
    Transform("empty", "the empty string came back as 'null' (an empty value stored as JSON null)",
              _empty_as("null"), ">="),
    Transform("empty", "the empty string came back as '\"\"' (JSON-encoded once more)", _empty_as('""'), ">="),
    Transform("JSON", "a JSON string unwrapped: the raw JSON text '\"…\"' came back as its content "
              "(the store parsed the arguments and kept the parsed value)", _json_unwrapped, "<="),
    Transform("JSON", "text wrapped in a JSON string (JSON-encoded once more on the way in)", json.dumps, ">="),
    Transform("escapes", "backslashes doubled (escaped twice)", lambda s: s.replace("\\", "\\\\"), ">="),
    Transform("escapes", "non-ASCII escaped as JSON \\u sequences (json.dumps with ensure_ascii on a field "
              "that should hold the text itself)", _json_string_body, ">="),
    Transform("escapes", "percent escapes decoded (%41 became A: a URL-decoding layer)", urllib.parse.unquote, "<="),
    Transform("escapes", "percent-encoded (a URL-encoding layer)", lambda s: urllib.parse.quote(s, safe=""), ">="),
    Transform("escapes", "HTML entities decoded (&amp; became &)", html.unescape),
    Transform("escapes", "HTML-escaped (& became &amp;: a template or sanitizer on the way)", html.escape, ">="),
    Transform("escapes", "backslash escapes decoded (\\n became a newline: an escape-processing layer, e.g. "
              "MySQL without NO_BACKSLASH_ESCAPES on hand-built SQL)", backslash_decoded),
    Transform("charset", "C1 controls read back as their Windows-1252 characters ('\\x91' became U+2018: a "
              "latin1 column read as cp1252)", _cp1252_c1, "="),
    Transform("charset", "UTF-8 bytes read as latin-1 (mojibake: 'é' became 'Ã©')", _utf8_as("latin-1"), ">="),
    Transform("charset", "UTF-8 bytes read as Windows-1252 (mojibake: 'é' became 'Ã©')", _utf8_as("cp1252"), ">="),
    Transform("charset", "characters outside the Basic Multilingual Plane replaced by '?' (a utf8mb3 / "
              "MySQL utf8 column: emoji need utf8mb4)", _utf8mb3, "="),
    Transform("charset", "characters outside latin-1 replaced by '?' (a latin1 column or connection)",
              _into("latin-1"), "="),
    Transform("charset", "non-ASCII characters replaced by '?' (an ASCII codec with replacement)", _into("ascii"), "="),
    Transform("charset", "non-ASCII characters replaced by U+FFFD (decoded with errors='replace')",
              _into("ascii", "\ufffd"), "="),
    Transform("charset", "non-ASCII characters dropped (encoded with errors='ignore')", _into("ascii", ""), "<="),
)

#: What is named beyond text: a list reshaped, an item's kind or field changed, where lost
#: or extra items lie, a queue's steers replaced. Each is ``(what it is about, the words
#: the line carries)``; the diagnoses in ``storetest._engine.diagnosis`` and
#: ``item_diagnosis`` (and the clauses that know the calls they made) say them, and
#: ``tests/test_explain.py`` shows each on a value only it explains.
SHAPES: Final[tuple[tuple[str, str], ...]] = (
    ("transcript", "messages came back newest first"),
    ("transcript", "identical messages deduplicated"),
    ("transcript", "adjacent messages of the same role merged into one"),
    ("transcript", "the save was ignored: the previous transcript is still there"),
    ("transcript", "saving an empty list left the old transcript in place"),
    ("transcript", "appended instead of replaced"),
    ("transcript", "messages reordered: they came back in the saved positions"),
    ("transcript", "content parts reordered: they came back in the saved positions"),
    ("attachment", "attachment bytes decoded as text"),
    ("sessions", "sessions merged: reading"),
    ("JSON", "raw JSON re-encoded"),
    ("items", "items came back newest first"),
    ("items", "identical items deduplicated"),
    ("items", "a type or role mapped to another"),
    ("items", "the field came back renamed to"),
    ("items", "the field's default"),
    ("items", "numbers coerced to text"),
    ("items", "came back as the integer"),
    ("items", "came back as the float"),
    ("items", "item(s) came back that belong to"),
    ("items", "every session holds the items of every other"),
    ("items", "every item after position"),
    ("items", "whole: an add_items() call acknowledged and not kept"),
    ("items", "in part"),
    ("items", "across a batch boundary"),
    ("items", "LIMIT 0 read as no limit"),
    ("items", "the read started past the items"),
    ("items", "returned the oldest"),
    ("steers", "two handles numbered their steers alike"),
    ("steers", "identical steers merged into one"),
    ("steers", "steers returned last-in-first-out"),
    ("steers", "a take capped by a page size or a byte budget"),
    ("steers", "taken before came back again"),
    ("steers", "a cached \"queue is empty\" that another handle's add did not invalidate"),
)

#: Widths that columns, keys and buffers commonly cut at, and where each comes from.
COLUMN_WIDTHS: Final[dict[int, str]] = {
    64: "a 64-wide key or VARCHAR(64)", 100: "VARCHAR(100)", 128: "VARCHAR(128)", 191: "VARCHAR(191) (a utf8mb4 index)",
    200: "VARCHAR(200)", 255: "VARCHAR(255) or TINYTEXT", 256: "a 256-wide buffer", 500: "VARCHAR(500)",
    512: "a 512-wide buffer", 1000: "VARCHAR(1000)", 1024: "a 1 KiB buffer", 2000: "VARCHAR(2000)",
    4000: "Oracle VARCHAR2(4000) or SQL Server NVARCHAR(4000)", 4096: "a 4 KiB page or buffer",
    8000: "SQL Server VARCHAR(8000)", 8192: "an 8 KiB page or buffer", 10485760: "VARCHAR(10485760)",
    16383: "VARCHAR(16383) (utf8mb4 in 65,535 bytes)", 21844: "VARCHAR(21844) (utf8mb3 in 65,535 bytes)",
    32767: "a signed 16-bit length", 65535: "MySQL TEXT or BLOB (65,535 bytes)", 65536: "a 64 KiB buffer",
    1048576: "a 1 MiB limit", 16777215: "MySQL MEDIUMTEXT or MEDIUMBLOB (16 MiB)",
    16777216: "a 16 MiB limit (a BSON document, max_allowed_packet)",
}

# Pairs cost len(TRANSFORMS)**2 applications: only on values short enough to be cheap.
_PAIR_LIMIT: Final = 2048


def truncation(sent: str, got: str) -> str | None:
    """``got`` is ``sent`` cut short: at which count, in characters and UTF-8 bytes, and
    whether that is a common width; ``None`` if it is not a cut."""
    if len(got) >= len(sent):
        return None
    sent_bytes, got_bytes = sent.encode("utf-8", "surrogatepass"), got.encode("utf-8", "surrogatepass")
    kept = got
    tail = ""
    if not sent.startswith(got):
        # A cut inside a multibyte character: the broken bytes dropped or replaced.
        stripped = got.rstrip("?\ufffd")
        if stripped == got or not sent.startswith(stripped):
            return None
        kept, tail = stripped, " (the character cut in half replaced)"
    chars, nbytes = len(kept), len(kept.encode("utf-8", "surrogatepass"))
    if len(got_bytes) > nbytes:
        nbytes = len(got_bytes) if got_bytes.rstrip(b"?") == kept.encode() else nbytes
    width = ""
    if chars in COLUMN_WIDTHS and chars != nbytes:
        counted = f"truncated at {chars} characters of {len(sent)} ({nbytes} bytes of {len(sent_bytes)})"
        width = f": {COLUMN_WIDTHS[chars]}, counted in characters"
    else:
        counted = f"truncated at {nbytes} bytes of {len(sent_bytes)}"
        if chars != nbytes:
            counted += f" ({chars} characters of {len(sent)})"
        for n in (nbytes, nbytes + 1, nbytes + 2, nbytes + 3):  # a cut that dropped a character cut in half
            if n in COLUMN_WIDTHS:
                width = f": {COLUMN_WIDTHS[n]}" + ("" if n == nbytes else f", cut at {n} bytes mid-character")
                break
        else:
            if chars in COLUMN_WIDTHS:
                width = f": {COLUMN_WIDTHS[chars]}"
    return counted + tail + (width or " (a length-limited column such as TEXT or VARCHAR)")


def explain_text(sent: str, got: str, partial: Callable[[str, str], str | None] | None = None) -> str | None:
    """The catalogue's line for what turned ``sent`` into ``got``; ``None`` if no known
    transform (alone, after a cut, or two in a row on short values) explains it.

    :param partial: tried after single transforms and cuts, before pairs: an explainer
        of changes no whole-value transform reproduces (JSON re-encoded by a parser).
    """
    if len(sent) + len(got) <= _CACHED:  # a failing clause asks about one pair many times
        return _explain_cached(sent, got, partial)
    return _explain(sent, got, partial)


_CACHED: Final = 1 << 16


@functools.lru_cache(maxsize=128)
def _explain_cached(sent: str, got: str, partial: Callable[[str, str], str | None] | None) -> str | None:
    return _explain(sent, got, partial)


def _explain(sent: str, got: str, partial: Callable[[str, str], str | None] | None) -> str | None:
    if sent == got:
        return None
    for t in TRANSFORMS:
        if t.could_make(sent, got) and _applies(t, sent) == got:
            return t.line
    cut = truncation(sent, got)
    if cut:
        return cut
    found = partial(sent, got) if partial else None
    if found:
        return found
    if len(sent) <= _PAIR_LIMIT:
        firsts = [(t, _applies(t, sent)) for t in TRANSFORMS]
        changed = [(first, once) for first, once in firsts if once != sent]
        for first, once in changed:
            for second in TRANSFORMS:
                if second is not first and _applies(second, once) == got:
                    return f"{first.line}, then {second.line}"
        for first, once in changed:
            cut = truncation(once, got)
            if cut:
                return f"{first.line}, then {cut}"
    return None


#: A call that raised, with the store's own frame it raised from (``Check.call``'s line,
#: and the runner's for an exception that ended a clause): ``save() raised StoreError:
#: ... (at store.py:12 in save)``.
RAISED_IN_STORE: Final = re.compile(r"\braised \S.* \(at [^()\n]+:\d+ in [^()\s]+\)")


def names_a_cause(diagnosis: str) -> bool:
    """Whether ``diagnosis`` carries a line of the catalogue: a transform of
    :data:`TRANSFORMS`, a cut at a count, or a reshaping of :data:`SHAPES`; or names a
    call the store raised on, the exception and the store's own frame it came from
    (:data:`RAISED_IN_STORE`: the raise is the cause, and the frame is where to look).
    Such a line tells the store author what to fix; a smaller example would not tell
    them more."""
    return ("truncated at " in diagnosis or any(t.line in diagnosis for t in TRANSFORMS)
            or any(words in diagnosis for _, words in SHAPES) or RAISED_IN_STORE.search(diagnosis) is not None)


def _applies(t: Transform, value: str) -> str:
    try:
        return t.apply(value)
    except Exception:  # a transform that cannot take this value explains nothing
        return value


def minimal_diff(sent: str, got: str, window: int = 12) -> str:
    """Where ``sent`` and ``got`` first differ, in characters and UTF-8 bytes, with a
    window of each around it (escaped) and both lengths."""
    at = next((i for i, (a, b) in enumerate(zip(sent, got, strict=False)) if a != b), min(len(sent), len(got)))
    byte_at = len(sent[:at].encode("utf-8", "surrogatepass"))
    start = max(0, at - window)

    def around(s: str) -> str:
        part = s[start:at + window]
        return ("…" if start else "") + repr(part)[1:-1] + ("…" if at + window < len(s) else "")

    return (f"first difference at character {at} (byte {byte_at}): sent “{around(sent)}”, got “{around(got)}”; "
            f"sent {len(sent)} characters ({len(sent.encode('utf-8', 'surrogatepass'))} bytes), got {len(got)} "
            f"({len(got.encode('utf-8', 'surrogatepass'))} bytes)")
