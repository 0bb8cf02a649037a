"""A lossless text encoding of messages, so store authors need not invent one.

``encode_message`` turns a :class:`~storetest.contract.Message` into one line of JSON
text and ``decode_message`` turns it back into an equal message:

- tool-call ``arguments`` travel as a JSON *string*, never as a nested object, so
  their bytes survive (a store that parsed them would reorder keys, drop duplicates,
  rewrite numbers);
- attachment bytes travel as base64;
- a message holding exactly one piece of text, the most common kind, is written
  ``{"role":...,"content":"the text"}``: its content is a string, not a list of parts,
  which makes it shorter to store and cheaper to parse;
- control characters, NUL included, are escaped, so the text holds no NUL and can go
  into any ``TEXT`` column (Postgres refuses NUL in text).

:func:`decode_message` checks everything, as it must for text from anywhere.
:func:`decode_trusted` is the fast path for text a store wrote itself with
:func:`encode_message`: it skips the value checks that such text cannot fail, as
:func:`trusted_text_message` does for a store that keeps a one-text message as its role
and raw text.

The encoding is deterministic: equal messages encode to equal text, which lets a
store compare what it wrote last time with what it is asked to write now without
decoding anything.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable
from typing import Any, Final

from storetest.contract import _ATTACHMENT_DATA_SLOT, Attachment, Content, Message, Text, ToolCall, ToolResult

__all__ = [
    "CodecError",
    "decode_message",
    "decode_messages",
    "decode_trusted",
    "decode_trusted_json",
    "encode_message",
    "encode_messages",
    "trusted_text_message",
    "trusted_tool_call_message",
    "trusted_tool_result_message",
]


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
    content = message.content
    if len(content) == 1 and type(content[0]) is Text:
        # What _dumps makes of {"role": ..., "content": text}, without the encoder's
        # walk over a dict: the common message costs two string escapes.
        return '{"role":' + _quote(message.role) + ',"content":' + _quote(content[0].text) + "}"
    return '{"role":' + _quote(message.role) + ',"content":[' + ",".join(map(_part_text, content)) + "]}"


def _part_text(part: Content) -> str:
    """What _dumps makes of ``_encode_part(part)``, by concatenation: no dict to build and
    walk, a save's other messages (tool calls, results) cost their string escapes."""
    if type(part) is ToolCall:
        return (
            '{"type":"tool_call","id":' + _quote(part.id) + ',"name":' + _quote(part.name)
            + ',"arguments":' + _quote(part.arguments) + "}"
        )
    if type(part) is ToolResult:
        return (
            '{"type":"tool_result","call_id":' + _quote(part.call_id) + ',"content":' + _quote(part.content)
            + (',"is_error":true}' if part.is_error else ',"is_error":false}')
        )
    if type(part) is Text:
        return '{"type":"text","text":' + _quote(part.text) + "}"
    if type(part) is Attachment:
        # The base64 alphabet needs no JSON escape: quoted as it is.
        data = base64.b64encode(part.data).decode("ascii")
        return '{"type":"attachment","media_type":' + _quote(part.media_type) + ',"data":"' + data + '"}'
    return _dumps(_encode_part(part))


# One encoder, built once: json.dumps builds a new JSONEncoder on every call that passes
# options, and encoding is on every save's path.
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# The string escape that encoder uses (ensure_ascii=False): quotes, backslashes and
# control characters escaped, everything else kept as is.
_quote: Callable[[str], str] = json.encoder.encode_basestring


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
        content = raw["content"]
        if isinstance(content, str):
            return Message(raw["role"], (Text(content),))
        return Message(raw["role"], tuple(_decode_part(p) for p in content))
    except CodecError:
        raise
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise CodecError(f"not an encoded message ({exc}): {text[:80]!r}") from None


def decode_messages(texts: Iterable[str | bytes]) -> list[Message]:
    return [decode_message(t) for t in texts]


# Trusted decoding builds the frozen values without running their checks: allocate the
# instance and write each slot through its member descriptor, the way the dataclass's
# own __init__ would, minus __post_init__. Looked up once; a change to the value types'
# fields breaks these lookups at import, not silently at run time.
_new = object.__new__
_set_text = Text.__dict__["text"].__set__
_set_call_id = ToolCall.__dict__["id"].__set__
_set_call_name = ToolCall.__dict__["name"].__set__
_set_call_arguments = ToolCall.__dict__["arguments"].__set__
_set_result_call_id = ToolResult.__dict__["call_id"].__set__
_set_result_content = ToolResult.__dict__["content"].__set__
_set_result_is_error = ToolResult.__dict__["is_error"].__set__
_set_media_type = Attachment.__dict__["media_type"].__set__
# The slot itself, not Attachment.data (which decodes on access): the trusted decoders
# leave the stored base64 text there, decoded on first access (see contract._AttachmentData).
_set_data = _ATTACHMENT_DATA_SLOT.__set__
_set_role = Message.__dict__["role"].__set__
_set_content = Message.__dict__["content"].__set__
# The C scanner json.loads ends in, without the wrapper around it (type checks, two
# whitespace regexes, the trailing-data check): half the cost of a short document.
# Text from encode_message has no surrounding whitespace; trailing data is checked below.
_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
# The scanner's string reader: from just after an opening quote to just after the closing
# one, unescaping; raises ValueError on a control character or a missing quote.
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


def _trusted_part(raw: dict[str, Any]) -> Content:
    kind = raw["type"]
    part: Any
    if kind == "text":
        part = _new(Text)
        _set_text(part, raw["text"])
    elif kind == "tool_call":
        part = _new(ToolCall)
        _set_call_id(part, raw["id"])
        _set_call_name(part, raw["name"])
        _set_call_arguments(part, raw["arguments"])
    elif kind == "tool_result":
        part = _new(ToolResult)
        _set_result_call_id(part, raw["call_id"])
        _set_result_content(part, raw["content"])
        _set_result_is_error(part, raw["is_error"])
    elif kind == "attachment":
        data = raw["data"]
        if type(data) is not str:
            raise CodecError(f"attachment data is {type(data).__name__}, not base64 text")
        part = _new(Attachment)
        _set_media_type(part, raw["media_type"])
        # Decoded when .data is first read: a reader that never looks at the bytes
        # never pays for them.
        _set_data(part, data)
    else:
        raise CodecError(f"unknown content type {kind!r}")
    return part  # type: ignore[no-any-return]


def trusted_text_message(role: str, text: str) -> Message:
    """``Message.text(role, text)`` without its checks, for a role and text the caller
    stored itself from a checked message (a store that keeps the common message, one
    piece of text, as its role and raw text rather than as encoded JSON).

    It skips what :class:`~storetest.contract.Message` and
    :class:`~storetest.contract.Text` check (that both are ``str``, the role one of
    :data:`~storetest.contract.ROLES`, no lone surrogate): values from a checked message
    pass them all, and values from anywhere else must go through ``Message.text``.
    """
    part = _new(Text)
    _set_text(part, text)
    message = _new(Message)
    _set_role(message, role)
    _set_content(message, (part,))
    return message


def trusted_tool_call_message(role: str, call_id: str, name: str, arguments: str) -> Message:
    """``Message(role, (ToolCall(call_id, name, arguments),))`` without their checks,
    for fields the caller stored itself from a checked message of that one part (a store
    that keeps such a message in columns rather than as encoded JSON). As
    :func:`trusted_text_message`: values from anywhere else must go through the
    constructors."""
    part = _new(ToolCall)
    _set_call_id(part, call_id)
    _set_call_name(part, name)
    _set_call_arguments(part, arguments)
    return _one_part_message(role, part)


def trusted_tool_result_message(role: str, call_id: str, content: str, is_error: bool) -> Message:
    """``Message(role, (ToolResult(call_id, content, is_error),))`` without their checks,
    for fields the caller stored itself from a checked message of that one part. As
    :func:`trusted_text_message`: values from anywhere else must go through the
    constructors."""
    part = _new(ToolResult)
    _set_result_call_id(part, call_id)
    _set_result_content(part, content)
    _set_result_is_error(part, is_error)
    return _one_part_message(role, part)


def _one_part_message(role: str, part: Content) -> Message:
    message = _new(Message)
    _set_role(message, role)
    _set_content(message, (part,))
    return message


def _trusted_message(raw: Any) -> Message:
    content = raw["content"]
    if type(content) is str:
        return trusted_text_message(raw["role"], content)
    message = _new(Message)
    _set_role(message, raw["role"])
    _set_content(message, tuple([_trusted_part(p) for p in content]))
    return message


def decode_trusted_json(raw: Any) -> Message:
    """:func:`decode_trusted` of text the caller has already parsed with ``json``: for a
    store whose records hold an encoded message inside a larger JSON document it wrote
    itself (a JSONL line), so the message is not parsed twice. The same checks, and the
    same trust: a missing field or an unknown content type raises, a field of the wrong
    type goes unnoticed.

    :raises CodecError: ``raw`` is not an encoded message's shape.
    """
    try:
        return _trusted_message(raw)
    except CodecError:
        raise
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise CodecError(f"not an encoded message ({exc}): {str(raw)[:80]!r}") from None


# The exact text encode_message writes before each kind of part (see _part_text):
# decode_trusted reads a list of parts string by string between these, with the
# scanner's own string reader, building no dict.
_CALL_HEAD: Final = '{"type":"tool_call","id":"'
_RESULT_HEAD: Final = '{"type":"tool_result","call_id":"'
_TEXT_HEAD: Final = '{"type":"text","text":"'
_ATTACHMENT_HEAD: Final = '{"type":"attachment","media_type":"'
_CALL_AT, _RESULT_AT, _TEXT_AT, _ATTACHMENT_AT = map(len, (_CALL_HEAD, _RESULT_HEAD, _TEXT_HEAD, _ATTACHMENT_HEAD))


def decode_trusted(text: str | bytes) -> Message:
    """The message :func:`encode_message` turned into ``text``, for text the caller
    wrote itself (a store reading back its own rows).

    It skips the checks :func:`decode_message` runs through the value types' constructors
    (that each field is a ``str``, ``bytes`` or ``bool``, the role one of
    :data:`~storetest.contract.ROLES`, no lone surrogate, base64 alphabet): text made
    by :func:`encode_message` from checked messages passes them all. It also calls
    the C scanner under :func:`json.loads` directly, skipping the wrapper's whitespace
    handling (encoded text has none); text exactly as :func:`encode_message` writes it
    is read string by string with that scanner's own string reader, building no dict.
    Text that is not JSON, has data after it, lacks a field or names an unknown content
    type still raises; other damage (a field of the wrong type) goes unnoticed, so never
    use it on text from anywhere else.

    An attachment's bytes are decoded from their base64 when its ``data`` is first read
    (and then kept): a reader that never looks at them never pays for them. Text that is
    not strict base64 (a character outside its alphabet, a control character among them,
    data after the padding) raises ``binascii.Error`` (a ``ValueError``) there, not here.

    :raises CodecError: ``text`` is not JSON of an encoded message's shape.
    """
    try:
        if not isinstance(text, str):
            text = text.decode("utf-8")
        if text.startswith('{"role":"'):
            role, at = _scan_string(text, 9)
            if text.startswith(',"content":[', at):
                # A list of parts, read as _part_text writes them, one string at a time
                # (inline: this is every message that is not one text, in every store).
                at += 12
                parts: list[Content] | None = None  # from a second part on
                part: Any
                while True:
                    if text.startswith(_CALL_HEAD, at):
                        call_id, at = _scan_string(text, at + _CALL_AT)
                        if not text.startswith(',"name":"', at):
                            break
                        name, at = _scan_string(text, at + 9)
                        if not text.startswith(',"arguments":"', at):
                            break
                        # The raw arguments: unescaped by the scanner's string reader,
                        # exactly as the scanner itself unescapes them.
                        arguments, at = _scan_string(text, at + 14)
                        part = _new(ToolCall)
                        _set_call_id(part, call_id)
                        _set_call_name(part, name)
                        _set_call_arguments(part, arguments)
                    elif text.startswith(_RESULT_HEAD, at):
                        call_id, at = _scan_string(text, at + _RESULT_AT)
                        if not text.startswith(',"content":"', at):
                            break
                        content, at = _scan_string(text, at + 12)
                        if text.startswith(',"is_error":false', at):
                            is_error, at = False, at + 17
                        elif text.startswith(',"is_error":true', at):
                            is_error, at = True, at + 16
                        else:
                            break
                        part = _new(ToolResult)
                        _set_result_call_id(part, call_id)
                        _set_result_content(part, content)
                        _set_result_is_error(part, is_error)
                    elif text.startswith(_TEXT_HEAD, at):
                        content, at = _scan_string(text, at + _TEXT_AT)
                        part = _new(Text)
                        _set_text(part, content)
                    elif text.startswith(_ATTACHMENT_HEAD, at):
                        media_type, at = _scan_string(text, at + _ATTACHMENT_AT)
                        if not text.startswith(',"data":"', at):
                            break
                        # Base64 has no quote or backslash: sliced up to the closing quote
                        # (found at memchr speed; the scanner walks it character by
                        # character). What else it may hold (a control character) is refused
                        # where it is decoded, in strict mode.
                        at += 9
                        end = text.find('"', at)
                        if end > 0 and text.find("\\", at, end) < 0:
                            data, at = text[at:end], end + 1
                        else:
                            data, at = _scan_string(text, at)
                        part = _new(Attachment)
                        _set_media_type(part, media_type)
                        _set_data(part, data)  # decoded when .data is first read
                    else:
                        break
                    if text.startswith("}]}", at) and at + 3 == len(text):
                        message = _new(Message)
                        _set_role(message, role)
                        if parts is None:
                            _set_content(message, (part,))  # one part, the commonest
                        else:
                            parts.append(part)
                            _set_content(message, tuple(parts))
                        return message
                    if not text.startswith("},", at):
                        break
                    at += 2
                    if parts is None:
                        parts = [part]
                    else:
                        parts.append(part)
                # Not as _part_text writes it: the scanner below decides.
            elif text.startswith(',"content":"', at):
                # The common message, {"role":"...","content":"the text"}, read without
                # building the dict the scanner would make of it.
                content, at = _scan_string(text, at + 12)
                if at == len(text) - 1 and text[at] == "}":
                    return trusted_text_message(role, content)
        raw, end = _scan(text, 0)
        if end != len(text):
            raise CodecError(f"not an encoded message (data after the JSON): {text[:80]!r}")
        return _trusted_message(raw)
    except CodecError:
        raise
    except StopIteration:
        # The scanner's way of saying there is no JSON value at the start.
        raise CodecError(f"not an encoded message (no JSON value): {text[:80]!r}") from None
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise CodecError(f"not an encoded message ({exc}): {text[:80]!r}") from None

