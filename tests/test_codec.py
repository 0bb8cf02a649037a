"""The lossless codec stores rely on."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storetest import CodecError, Message, decode_message, encode_message
from storetest._engine.strategies import messages
from storetest.codec import (
    decode_trusted,
    decode_trusted_json,
    trusted_text_message,
    trusted_tool_call_message,
    trusted_tool_result_message,
)
from storetest.contract import _ATTACHMENT_DATA_SLOT, ROLES, Attachment, Text, ToolCall, ToolResult


@given(messages)
def test_every_message_survives_the_codec(message: Message) -> None:
    text = encode_message(message)
    assert decode_message(text) == message
    assert decode_message(text.encode("utf-8")) == message


@given(messages)
def test_encoded_text_has_no_nul_and_is_valid_utf8(message: Message) -> None:
    text = encode_message(message)
    assert "\x00" not in text
    text.encode("utf-8")


@given(messages)
def test_encoding_is_deterministic(message: Message) -> None:
    copy = Message(message.role, tuple(message.content))
    assert encode_message(copy) == encode_message(message)


def test_arguments_travel_as_a_string_not_as_json() -> None:
    from storetest import ToolCall

    raw = '{"z":1,"a":2,"z":3}'
    text = encode_message(Message("assistant", (ToolCall("c", "f", raw),)))
    assert '"arguments":"{\\"z\\":1,\\"a\\":2,\\"z\\":3}"' in text


@pytest.mark.parametrize("garbage", ["", "{", "[]", '{"role":"user"}', '{"role":"x","content":[]}',
                                      '{"role":"user","content":[{"type":"video"}]}'])
def test_garbage_raises_codec_error(garbage: str) -> None:
    with pytest.raises(CodecError):
        decode_message(garbage)


# -- the trusted path, for text a store wrote itself --------------------------------------


@given(messages)
def test_trusted_decoding_gives_the_same_message(message: Message) -> None:
    text = encode_message(message)
    trusted = decode_trusted(text)
    assert trusted == message
    assert hash(trusted) == hash(message)
    assert decode_trusted(text.encode("utf-8")) == message


@pytest.mark.parametrize("garbage", ["", "{", "[]", '{"role":"user"}',
                                      '{"role":"user","content":[{"type":"video"}]}',
                                      '{"role":"user","content":[{"text":"no type"}]}',
                                      '{"role":"user","content":[]} and more',
                                      ' {"role":"user","content":[]}', b"\xff"])
def test_trusted_decoding_still_refuses_what_is_not_a_message(garbage: str | bytes) -> None:
    with pytest.raises(CodecError):
        decode_trusted(garbage)


@given(messages)
def test_trusted_decoding_of_parsed_json_gives_the_same_message(message: Message) -> None:
    """For a store whose records embed the encoded message in a larger JSON document."""
    assert decode_trusted_json(json.loads(encode_message(message))) == message


@pytest.mark.parametrize("garbage", [[], "text", {"role": "user"}, {"role": "user", "content": [{"type": "video"}]},
                                     {"role": "user", "content": [{"text": "no type"}]}, None])
def test_trusted_decoding_of_parsed_json_refuses_what_is_not_a_message(garbage: object) -> None:
    with pytest.raises(CodecError):
        decode_trusted_json(garbage)


def test_only_the_public_decoder_checks_values() -> None:
    """The checks the trusted path skips are real: untrusted text must keep them."""
    wrong_role = '{"role":"robot","content":[]}'
    wrong_type = '{"role":"user","content":[{"type":"text","text":5}]}'
    for text in (wrong_role, wrong_type):
        with pytest.raises(CodecError):
            decode_message(text)
        decode_trusted(text)  # no error: only for text the caller encoded itself


def test_one_piece_of_text_is_stored_as_a_string() -> None:
    """The common message is short to store; the list form still decodes the same."""
    message = Message.text("user", "hi")
    assert encode_message(message) == '{"role":"user","content":"hi"}'
    as_list = '{"role":"user","content":[{"type":"text","text":"hi"}]}'
    assert decode_message(as_list) == message == decode_trusted(as_list)
    two = Message("user", (Text("a"), Text("b")))
    assert encode_message(two).startswith('{"role":"user","content":[')


def test_content_that_is_neither_text_nor_parts_is_refused() -> None:
    for text in ('{"role":"user","content":5}', '{"role":"user","content":{"type":"text"}}'):
        with pytest.raises(CodecError):
            decode_message(text)


# -- the short forms of the common message --------------------------------------------


@given(st.sampled_from(sorted(ROLES)), st.text())
def test_one_text_encodes_exactly_as_the_json_encoder_would(role: str, text: str) -> None:
    """The common message skips the JSON encoder; its text must be the encoder's, byte
    for byte, or stored digests stop matching what a save computes."""
    message = Message.text(role, text)  # type: ignore[arg-type]
    assert encode_message(message) == json.dumps(
        {"role": role, "content": text}, ensure_ascii=False, separators=(",", ":")
    )


@given(messages)
def test_every_message_encodes_exactly_as_the_json_encoder_would(message: Message) -> None:
    """Every part is written by concatenation, not by the encoder; its text must be the
    encoder's, byte for byte, or stored digests stop matching what a save computes."""
    from storetest.codec import _encode_part

    content: object = (
        message.content[0].text
        if len(message.content) == 1 and type(message.content[0]) is Text
        else [_encode_part(p) for p in message.content]
    )
    assert encode_message(message) == json.dumps(
        {"role": message.role, "content": content}, ensure_ascii=False, separators=(",", ":")
    )


@given(st.sampled_from(sorted(ROLES)), st.text())
def test_one_text_decodes_as_the_general_path_does(role: str, text: str) -> None:
    body = encode_message(Message.text(role, text))  # type: ignore[arg-type]
    # Spaces after the colons keep the text JSON but off the short path.
    spaced = body.replace('{"role":', '{"role": ', 1)
    assert decode_trusted(body) == decode_trusted(spaced) == decode_message(body)


@pytest.mark.parametrize(
    "garbage",
    ['{"role":"user","content":"hi"', '{"role":"user","content":"hi"} ', '{"role":"user","content":"hi"}}',
     '{"role":"user","content":"h\ni"}', '{"role":"user","content":"hi', '{"role":"us'],
)
def test_the_short_path_refuses_what_the_general_one_refuses(garbage: str) -> None:
    with pytest.raises(CodecError):
        decode_trusted(garbage)


@given(st.sampled_from(sorted(ROLES)), st.text())
def test_a_trusted_text_message_equals_the_checked_one(role: str, text: str) -> None:
    made = trusted_text_message(role, text)
    assert made == Message.text(role, text)  # type: ignore[arg-type]
    assert hash(made) == hash(Message.text(role, text))  # type: ignore[arg-type]


@given(st.sampled_from(sorted(ROLES)), st.text(), st.text(), st.text(), st.booleans())
def test_trusted_tool_messages_equal_the_checked_ones(
    role: str, call_id: str, name: str, text: str, is_error: bool
) -> None:
    call = trusted_tool_call_message(role, call_id, name, text)
    result = trusted_tool_result_message(role, call_id, text, is_error)
    assert call == Message(role, (ToolCall(call_id, name, text),))  # type: ignore[arg-type]
    assert result == Message(role, (ToolResult(call_id, text, is_error),))  # type: ignore[arg-type]
    assert hash(call) == hash(Message(role, (ToolCall(call_id, name, text),)))  # type: ignore[arg-type]
    assert encode_message(result) == encode_message(Message(role, (ToolResult(call_id, text, is_error),)))  # type: ignore[arg-type]


def test_a_trusted_text_message_skips_the_checks() -> None:
    """Only for values a store wrote from a checked message: nothing is checked."""
    assert trusted_text_message("robot", "x").role == "robot"
    with pytest.raises(ValueError):
        Message.text("robot", "x")  # type: ignore[arg-type]


# -- lists of parts read string by string -----------------------------------------------

_ids = st.text(max_size=12)


@given(st.sampled_from(sorted(ROLES)), _ids, _ids, st.text())
def test_one_tool_call_decodes_as_the_general_path_does(role: str, call_id: str, name: str, arguments: str) -> None:
    """decode_trusted reads one tool call string by string; the arguments come back byte
    for byte, as the general path (the scanner's dicts) gives them."""
    message = Message(role, (ToolCall(call_id, name, arguments),))  # type: ignore[arg-type]
    body = encode_message(message)
    spaced = body.replace('{"role":', '{"role": ', 1)  # JSON still, off the short path
    made = decode_trusted(body)
    assert made == decode_trusted(spaced) == decode_message(body) == message
    call = made.content[0]
    assert type(call) is ToolCall and call.arguments == arguments
    assert hash(made) == hash(message)


@given(st.sampled_from(sorted(ROLES)), _ids, st.text(), st.booleans())
def test_one_tool_result_decodes_as_the_general_path_does(
    role: str, call_id: str, content: str, is_error: bool
) -> None:
    message = Message(role, (ToolResult(call_id, content, is_error),))  # type: ignore[arg-type]
    body = encode_message(message)
    spaced = body.replace('{"role":', '{"role": ', 1)
    made = decode_trusted(body)
    assert made == decode_trusted(spaced) == decode_message(body) == message
    assert made.content[0].is_error is is_error  # type: ignore[union-attr]


@given(messages)
def test_every_list_of_parts_decodes_as_the_general_path_does(message: Message) -> None:
    """Parts are read string by string where the text is exactly encode_message's, by the
    scanner otherwise (the spaced text): the two give the same message."""
    body = encode_message(message)
    spaced = body.replace('{"role":', '{"role": ', 1)
    assert decode_trusted(body) == decode_trusted(spaced) == message


_CALL = '{"role":"assistant","content":[{"type":"tool_call","id":"c","name":"f","arguments":"{}"}]}'
_TWO = '{"role":"user","content":[{"type":"text","text":"a"},{"type":"attachment","media_type":"a/b","data":"AA=="}]}'
_RESULT = '{"role":"tool","content":[{"type":"tool_result","call_id":"c","content":"out","is_error":false}]}'


@pytest.mark.parametrize(
    "garbage",
    [_CALL[:-1], _CALL + " ", _CALL + "}", _CALL[:-3] + "}}", _CALL.replace('"arguments"', '"argument"'),
     _CALL.replace('"{}"', '"{\n}"'), _CALL[:40], _RESULT[:-1], _RESULT + "]",
     _RESULT.replace("false", "fals"), _RESULT.replace('"out"', '"o\tut"'), _RESULT[:50],
     _TWO[:-1], _TWO + "}", _TWO.replace("},{", "},,{"), _TWO.replace("},{", "}{"), _TWO.replace("}]}", "},]}"),
     _TWO.replace('"AA=="', '"AA=="x'), _TWO.replace('"type":"text"', '"type":"video"')],
)
def test_the_parts_short_path_refuses_what_the_general_one_refuses(garbage: str) -> None:
    with pytest.raises(CodecError):
        decode_trusted(garbage)


def test_the_parts_short_path_reads_each_kind_of_part() -> None:
    assert decode_trusted(_RESULT).content == (ToolResult("c", "out", False),)
    assert decode_trusted(_RESULT.replace("false", "true")).content == (ToolResult("c", "out", True),)
    assert decode_trusted(_CALL).content == (ToolCall("c", "f", "{}"),)
    assert decode_trusted(_TWO).content == (Text("a"), Attachment("a/b", b"\x00"))


# -- attachments decoded on first access ---------------------------------------------------

_IMAGE = Attachment("image/png", bytes(range(256)) * 3)
_WITH_IMAGE = Message("user", (Text("look"), _IMAGE))


def _lazy() -> Attachment:
    """A trusted decoding's attachment, its data not yet read."""
    part = decode_trusted(encode_message(_WITH_IMAGE)).content[1]
    assert type(part) is Attachment
    assert type(_ATTACHMENT_DATA_SLOT.__get__(part)) is str  # still the stored base64
    return part


def test_a_trusted_attachment_is_decoded_on_first_access_and_kept() -> None:
    part = _lazy()
    data = part.data
    assert type(data) is bytes and data == _IMAGE.data
    assert _ATTACHMENT_DATA_SLOT.__get__(part) is data  # kept: decoded once
    assert part.data is data


@pytest.mark.parametrize(
    "data",
    ['"AA\\tA="', '"AA\tA="', '"AA\\u0000A="', '"A A=="', '"AA=x"', '"AAA"'],
    ids=["escaped-tab", "raw-tab", "escaped-nul", "space", "data-after-padding", "no-padding"],
)
def test_damaged_base64_raises_at_first_access_never_decodes_to_other_bytes(data: str) -> None:
    """Attachment data is sliced from the stored text, not scanned, and decoded when
    first read: text outside base64's alphabet (or past its padding) raises there, as
    the general path's ``validate=True`` does, instead of being skipped."""
    part = decode_trusted(_TWO.replace('"AA=="', data)).content[1]
    with pytest.raises(ValueError):
        part.data  # noqa: B018
    with pytest.raises(CodecError):
        decode_message(_TWO.replace('"AA=="', data))


@pytest.mark.parametrize(
    "look",
    [
        pytest.param(lambda a: a == _IMAGE, id="eq"),
        pytest.param(lambda a: _IMAGE == a, id="eq-reflected"),
        pytest.param(lambda a: hash(a) == hash(_IMAGE), id="hash"),
        pytest.param(lambda a: repr(a) == repr(_IMAGE), id="repr"),
        pytest.param(lambda a: pickle.loads(pickle.dumps(a)) == _IMAGE, id="pickle"),
        pytest.param(lambda a: type(pickle.loads(pickle.dumps(a)).data) is bytes, id="pickled-bytes"),
        pytest.param(lambda a: copy.copy(a) == _IMAGE, id="copy"),
        pytest.param(lambda a: copy.deepcopy(a) == _IMAGE, id="deepcopy"),
        pytest.param(lambda a: dataclasses.asdict(a) == dataclasses.asdict(_IMAGE), id="asdict"),
        pytest.param(lambda a: dataclasses.astuple(a) == dataclasses.astuple(_IMAGE), id="astuple"),
        pytest.param(lambda a: dataclasses.replace(a, media_type="x/y") == Attachment("x/y", _IMAGE.data),
                     id="replace"),
        pytest.param(lambda a: getattr(a, "data") == _IMAGE.data, id="getattr"),  # noqa: B009
        pytest.param(lambda a: {a: 1}[_IMAGE] == 1, id="dict-key"),
        pytest.param(lambda a: encode_message(Message("user", (a,))) == encode_message(Message("user", (_IMAGE,))),
                     id="encode"),
    ],
)
def test_a_lazy_attachment_looks_like_a_checked_one(look: Any) -> None:
    """Each way of looking at an attachment, as its first look at the data."""
    assert look(_lazy())


def test_a_lazy_attachment_in_a_message_looks_like_a_checked_one() -> None:
    message = decode_trusted(encode_message(_WITH_IMAGE))
    assert message == _WITH_IMAGE and hash(decode_trusted(encode_message(_WITH_IMAGE))) == hash(_WITH_IMAGE)
    assert repr(decode_trusted(encode_message(_WITH_IMAGE))) == repr(_WITH_IMAGE)
    assert pickle.loads(pickle.dumps(decode_trusted(encode_message(_WITH_IMAGE)))) == _WITH_IMAGE


def test_a_lazy_attachment_is_as_frozen_as_a_checked_one() -> None:
    part = _lazy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.data = b"x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del part.data
    refusals = []
    for attachment in (part, Attachment("image/png", b"")):
        try:
            attachment.other = 1  # type: ignore[attr-defined]
        except Exception as exc:  # 3.11 raises TypeError (its slots dataclasses), later ones AttributeError
            refusals.append(type(exc))
    assert len(refusals) == 2 and refusals[0] is refusals[1]
    assert part.data == _IMAGE.data


def test_the_class_attribute_and_the_fields_are_unchanged() -> None:
    assert [f.name for f in dataclasses.fields(Attachment)] == ["media_type", "data"]
    assert Attachment.__slots__ == ("media_type", "data")
    assert Attachment.__match_args__ == ("media_type", "data")
    match _lazy():
        case Attachment(media_type, data):
            assert (media_type, data) == (_IMAGE.media_type, _IMAGE.data)
    # A checked Attachment still refuses base64 text for bytes: only the trusted
    # decoders leave text in the slot.
    with pytest.raises(TypeError):
        Attachment("image/png", "AAAA")  # type: ignore[arg-type]


def test_parsed_json_gives_a_lazy_attachment_too() -> None:
    part = decode_trusted_json(json.loads(encode_message(_WITH_IMAGE))).content[1]
    assert type(_ATTACHMENT_DATA_SLOT.__get__(part)) is str
    assert part == _IMAGE


def test_trusted_attachment_data_that_is_not_text_is_refused() -> None:
    with pytest.raises(CodecError):
        decode_trusted('{"role":"user","content":[{"type":"attachment","media_type":"a/b","data":5}]}')
