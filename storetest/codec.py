"""A lossless text encoding of messages, so store authors need not invent one.

``encode_message`` turns a :class:`~storetest.contract.Message` into one line of JSON
text and ``decode_message`` turns it back into an equal message:

- tool-call ``arguments`` travel as a JSON *string*, never as a nested object, so
  their bytes survive (a store that parsed them would reorder keys, drop duplicates,
  rewrite numbers);
- attachment bytes travel as base64;
- control characters, NUL included, are escaped, so the text holds no NUL and can go
  into any ``TEXT`` column (Postgres refuses NUL in text).

The encoding is deterministic: equal messages encode to equal text, which lets a
store compare what it wrote last time with what it is asked to write now without
decoding anything.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

from storetest.contract import Attachment, Content, Message, Text, ToolCall, ToolResult

__all__ = ["CodecError", "decode_message", "decode_messages", "encode_message", "encode_messages"]


class CodecError(ValueError):
    """Stored text could not be decoded into a message (it was corrupted or is not ours)."""


def _encode_part(part: Content) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, ToolCall):
        return {"type": "tool_call", "id": part.id, "name": part.name, "arguments": part.arguments}
    if isinstance(part, ToolResult):
        return {
            "type": "tool_result",
            "call_id": part.call_id,
            "content": part.content,
            "is_error": part.is_error,
        }
    return {
        "type": "attachment",
        "media_type": part.media_type,
        "data": base64.b64encode(part.data).decode("ascii"),
    }


def encode_message(message: Message) -> str:
    """One message as compact JSON text (no NUL, valid UTF-8, deterministic)."""
    body = {"role": message.role, "content": [_encode_part(p) for p in message.content]}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def encode_messages(messages: Iterable[Message]) -> list[str]:
    return [encode_message(m) for m in messages]


def _decode_part(raw: dict[str, Any]) -> Content:
    kind = raw["type"]
    if kind == "text":
        return Text(raw["text"])
    if kind == "tool_call":
        return ToolCall(raw["id"], raw["name"], raw["arguments"])
    if kind == "tool_result":
        return ToolResult(raw["call_id"], raw["content"], raw["is_error"])
    if kind == "attachment":
        return Attachment(raw["media_type"], base64.b64decode(raw["data"], validate=True))
    raise CodecError(f"unknown content type {kind!r}")


def decode_message(text: str | bytes) -> Message:
    """The message that :func:`encode_message` turned into ``text``.

    :raises CodecError: ``text`` is not an encoded message.
    """
    try:
        raw = json.loads(text)
        return Message(raw["role"], tuple(_decode_part(p) for p in raw["content"]))
    except CodecError:
        raise
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise CodecError(f"not an encoded message ({exc}): {text[:80]!r}") from None


def decode_messages(texts: Iterable[str | bytes]) -> list[Message]:
    return [decode_message(t) for t in texts]
