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
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from storetest.codec import decode_message, encode_message
from storetest.contract import Message
from storetest.entries import Compaction, Custom, Entry, EntryKind

__all__ = ["decode_payload", "decode_time", "encode_payload", "encode_time", "payload_from_json"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE: Final = datetime(1970, 1, 1)
_US: Final = timedelta(microseconds=1)


def encode_time(when: datetime) -> tuple[int, int]:
    """(microseconds since the epoch, UTC offset in seconds) of an aware datetime."""
    offset = when.utcoffset()
    assert offset is not None  # Entry refuses naive times
    return (when - _EPOCH) // _US, offset // timedelta(seconds=1)


def decode_time(micros: int, offset_seconds: int) -> datetime:
    """The datetime :func:`encode_time` was given, offset included."""
    offset = timedelta(seconds=offset_seconds)
    # Through the local wall time: it is in range whenever the original was.
    return (_EPOCH_NAIVE + (micros * _US + offset)).replace(tzinfo=timezone(offset))


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


def decode_payload(kind: EntryKind, text: str) -> Message | Custom | Compaction:
    """The payload :func:`encode_payload` wrote for a ``kind`` entry.

    :raises ValueError, KeyError, TypeError: ``text`` is not such a payload.
    """
    if kind in ("message", "meta"):
        return decode_message(text)
    return payload_from_json(kind, json.loads(text))
