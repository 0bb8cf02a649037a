"""How the log stores write an entry down: one encoding, shared by the JSONL, SQLite and
PostgreSQL log stores (each backend supplies only where the pieces go).

- A creation time is two integers: the instant as microseconds since 1970-01-01 UTC,
  and the UTC offset in seconds. Both exact; no time zone database, no local time, and
  no instant a driver cannot decode (``datetime(1, 1, 1, tzinfo=+14:00)`` is in year 0
  in UTC, which ``datetime`` cannot hold; its local wall time always can).
- A payload is JSON text, a different shape per kind: a message or meta entry holds
  :func:`storetest.codec.encode_message` text; a custom entry ``{"kind": ..., "data":
  ...}`` with the application's raw JSON as a *string* value (so its bytes survive); a
  compaction ``{"summary": ..., "firstKeptEntryId": ...}``. ``json.dumps`` escapes NUL
  and line breaks, so payloads fit a ``text`` column and a JSONL line.

Reading back what a store wrote itself is the hot path of a load (10,000 entries), so
it has trusted forms, as :mod:`storetest.codec` has: :func:`trusted_entry` and
:func:`decode_trusted_payload` skip the value checks that fields written from a checked
:class:`~storetest.entries.Entry` cannot fail. They still refuse an unknown kind and a
payload that is not JSON of its kind's shape; a field of the wrong type deep inside a
message goes unnoticed (see :func:`storetest.codec.decode_trusted`).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from storetest.codec import decode_message, decode_trusted, decode_trusted_json, encode_message
from storetest.contract import Message
from storetest.entries import KINDS, Compaction, Custom, Entry, EntryKind

__all__ = [
    "decode_payload",
    "decode_time",
    "decode_trusted_payload",
    "encode_payload",
    "encode_time",
    "gc_paused",
    "payload_from_json",
    "trusted_entry",
    "trusted_payload_from_json",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
_US: Final = timedelta(microseconds=1)


def encode_time(when: datetime) -> tuple[int, int]:
    """(microseconds since the epoch, UTC offset in seconds) of an aware datetime."""
    offset = when.utcoffset()
    assert offset is not None  # Entry refuses naive times
    return (when - _EPOCH) // _US, offset // timedelta(seconds=1)


_ZONES: dict[int, tuple[timedelta, timezone]] = {}


def decode_time(micros: int, offset_seconds: int) -> datetime:
    """The datetime :func:`encode_time` was given, offset included."""
    zone = _ZONES.get(offset_seconds)
    if zone is None:
        offset = timedelta(seconds=offset_seconds)
        zone = _ZONES[offset_seconds] = (offset, timezone(offset))
        if len(_ZONES) > 4096:  # offsets are few; bound the cache all the same
            _ZONES.clear()
    # Through the local wall time: it is in range whenever the original was.
    return (_EPOCH_NAIVE + (micros * _US + zone[0])).replace(tzinfo=zone[1])


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block: a load makes five or more objects
    per entry, none of them in a cycle, and with the collector on each 700 allocations
    start a pass over the young objects (a fifth of a 10,000-entry JSONL load here).
    Turned back on only if it was on, so an application that keeps it off keeps it off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_new = object.__new__
_set_id, _set_parent, _set_created, _set_kind, _set_payload = (
    Entry.__dict__[name].__set__ for name in ("id", "parent_id", "created_at", "kind", "payload")
)
_KINDS: Final = frozenset(KINDS)


def trusted_entry(entry_id: str, parent_id: str | None, created_at: datetime, kind: str,
                  payload: Message | Custom | Compaction) -> Entry:
    """``Entry(...)`` without its checks, for fields a store wrote from a checked entry and
    read back: each id a ``str``, the time aware (as :func:`decode_time` makes it), the
    payload of its kind (as :func:`decode_trusted_payload` makes it). Only the kind is
    checked, since it picks the payload's type.

    :raises ValueError: ``kind`` is not an entry kind.
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown entry kind {kind!r}")
    entry = _new(Entry)
    _set_id(entry, entry_id)
    _set_parent(entry, parent_id)
    _set_created(entry, created_at)
    _set_kind(entry, kind)
    _set_payload(entry, payload)
    return entry


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def encode_payload(entry: Entry) -> str:
    """The entry's payload as JSON text (see the module docstring)."""
    payload = entry.payload
    if isinstance(payload, Message):
        return encode_message(payload)
    if isinstance(payload, Custom):
        return _dumps({"kind": payload.kind, "data": payload.data})
    return _dumps({"summary": payload.summary, "firstKeptEntryId": payload.first_kept_id})


def payload_from_json(kind: EntryKind, raw: Any) -> Message | Custom | Compaction:
    """The payload of a ``kind`` entry from its parsed JSON (a dict).

    :raises ValueError, KeyError, TypeError: ``raw`` is not such a payload.
    """
    if kind in ("message", "meta"):
        # The codec decodes text; re-encoding a parsed message is cheap and keeps one decoder.
        return decode_message(_dumps(raw))
    if kind == "custom":
        return Custom(raw["kind"], raw["data"])
    if kind == "compaction":
        return Compaction(raw["summary"], raw["firstKeptEntryId"])
    raise ValueError(f"unknown entry kind {kind!r}")


def trusted_payload_from_json(kind: str, raw: Any) -> Message | Custom | Compaction:
    """:func:`payload_from_json` for a payload the store wrote itself: a message is built
    by :func:`storetest.codec.decode_trusted_json`; custom and compaction payloads (few)
    are checked as ever.

    :raises ValueError, KeyError, TypeError: ``raw`` is not such a payload.
    """
    if kind == "message" or kind == "meta":
        return decode_trusted_json(raw)
    return payload_from_json(kind, raw)  # type: ignore[arg-type]


def decode_trusted_payload(kind: str, text: str) -> Message | Custom | Compaction:
    """:func:`decode_payload` for text the store wrote itself (see the module docstring).

    :raises ValueError, KeyError, TypeError: ``text`` is not such a payload.
    """
    if kind == "message" or kind == "meta":
        return decode_trusted(text)
    return decode_payload(kind, text)  # type: ignore[arg-type]


def decode_payload(kind: EntryKind, text: str) -> Message | Custom | Compaction:
    """The payload :func:`encode_payload` wrote for a ``kind`` entry.

    :raises ValueError, KeyError, TypeError: ``text`` is not such a payload.
    """
    if kind in ("message", "meta"):
        return decode_message(text)
    return payload_from_json(kind, json.loads(text))
