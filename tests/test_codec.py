"""The lossless codec stores rely on."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storetest import CodecError, Message, decode_message, encode_message
from storetest._engine.strategies import messages
from storetest.codec import decode_trusted, decode_trusted_json, trusted_text_message
from storetest.contract import ROLES, Text


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


def test_a_trusted_text_message_skips_the_checks() -> None:
    """Only for values a store wrote from a checked message: nothing is checked."""
    assert trusted_text_message("robot", "x").role == "robot"
    with pytest.raises(ValueError):
        Message.text("robot", "x")  # type: ignore[arg-type]
