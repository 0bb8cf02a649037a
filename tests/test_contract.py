"""The message model and argument checks refuse bad values up front, naming the field."""

from __future__ import annotations

import asyncio

import pytest

from reference_stores.memory import MemoryStore
from storetest import (
    MAX_SESSION_ID_BYTES,
    Attachment,
    Message,
    Text,
    ToolCall,
    ToolResult,
    check_messages,
    check_session_id,
    check_steer_text,
    open_session,
)


@pytest.mark.parametrize(
    ("make", "error", "words"),
    [
        (lambda: Message("robot", ()), ValueError, "Message.role"),
        (lambda: Message(1, ()), TypeError, "Message.role"),  # type: ignore[arg-type]
        (lambda: Message("user", "hi"), TypeError, "Message.content"),  # type: ignore[arg-type]
        (lambda: Message("user", ["hi"]), TypeError, "Message.content[0]"),  # type: ignore[list-item]
        (lambda: Text(b"x"), TypeError, "Text.text"),  # type: ignore[arg-type]
        (lambda: Text("\ud800"), ValueError, "lone surrogate"),
        (lambda: ToolCall("id", "f", None), TypeError, "ToolCall.arguments"),  # type: ignore[arg-type]
        (lambda: ToolResult("id", "x", "yes"), TypeError, "ToolResult.is_error"),  # type: ignore[arg-type]
        (lambda: Attachment("image/png", bytearray(b"x")), TypeError, "Attachment.data"),  # type: ignore[arg-type]
    ],
)
def test_bad_values_are_refused_naming_the_field(make, error, words) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_content_is_frozen_as_a_tuple() -> None:
    parts = [Text("a")]
    message = Message("user", parts)  # type: ignore[arg-type]
    parts.append(Text("b"))
    assert message.content == (Text("a"),)
    with pytest.raises(AttributeError):
        message.role = "assistant"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "error"),
    [(None, TypeError), (b"a", TypeError), ("", ValueError), ("\udc80", ValueError),
     ("é" * (MAX_SESSION_ID_BYTES // 2 + 1), ValueError), ("x" * (MAX_SESSION_ID_BYTES + 1), ValueError)],
)
def test_session_ids_are_checked(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="session"):
        check_session_id(value)


def test_exact_ids_pass_unchanged() -> None:
    for value in ("a", "A", "a ", "é", "e\u0301", "a\x00b", "x" * MAX_SESSION_ID_BYTES):
        assert check_session_id(value) == value


def test_messages_and_steer_text_are_checked() -> None:
    with pytest.raises(TypeError, match=r"messages\[1\]"):
        check_messages([Message.text("user", "x"), "y"])
    with pytest.raises(TypeError, match="messages must be"):
        check_messages("text")
    with pytest.raises(TypeError, match="text must be str"):
        check_steer_text(5)
    assert check_steer_text("\x00") == "\x00"


class SyncStore:
    """The smallest synchronous store: what the Session handle must also accept."""

    def __init__(self) -> None:
        self.transcripts: dict[str, list[Message]] = {}
        self.steers: dict[str, list[str]] = {}

    def save(self, session: str, messages: list[Message]) -> None:
        self.transcripts[check_session_id(session)] = list(check_messages(messages))

    def messages(self, session: str) -> list[Message]:
        return list(self.transcripts.get(check_session_id(session), []))

    def add_steer(self, session: str, text: str) -> None:
        self.steers.setdefault(check_session_id(session), []).append(check_steer_text(text))

    def take_steers(self, session: str) -> list[str]:
        return self.steers.pop(check_session_id(session), [])


@pytest.mark.parametrize("store", [MemoryStore(), SyncStore()], ids=["async", "sync"])
def test_a_session_handle_works_with_async_and_sync_stores(store: object) -> None:
    async def use() -> tuple[list[Message], list[str], list[str]]:
        session = open_session("conversation-1", store)  # type: ignore[arg-type]
        await session.save([Message.text("user", "hi")])
        await session.steer("check the lease expiry")
        return await session.messages(), await session.take_steers(), await session.take_steers()

    assert asyncio.run(use()) == ([Message.text("user", "hi")], ["check the lease expiry"], [])


def test_open_session_refuses_a_bad_id() -> None:
    with pytest.raises(ValueError, match="session"):
        open_session("", MemoryStore())
