"""The lossless codec stores rely on."""

from __future__ import annotations

import pytest
from hypothesis import given

from storetest import CodecError, Message, decode_message, encode_message
from storetest.strategies import messages


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
