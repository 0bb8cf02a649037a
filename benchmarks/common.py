"""What every benchmark here states with its figures, in one place: the workload (a
conversation shaped like an agent's), the durability each contender ran at (read back
from its connection or server, never assumed), and the machine's load.

The agent conversation repeats a cycle of ten messages: a user's request, the
assistant's tool call (raw JSON arguments, with the spacing and key order a model
produces), the tool's result, a second call and result, the assistant's answer, a user
message with a small attachment (text and a 1 KiB image), a third call and result, and
the assistant's closing text. Three in ten are one-text messages (the shape the SQLite
store keeps without JSON); the rest are tool calls, tool results and an attachment.
``one_text`` is the older workload, every message one piece of text, kept for the rows
that name it.
"""

from __future__ import annotations

import base64
import os
import sqlite3
from typing import Any

from storetest import databases
from storetest.contract import Attachment, Message, Role, Text, ToolCall, ToolResult

#: Characters of text in a one-text message (and of a tool result).
SIZE = 500

_FILLER = "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
_IMAGE = bytes(range(256)) * 4  # 1 KiB of bytes that are not text

AGENT = "agent conversation (per 10 messages: 3 one-text, 3 tool calls with raw JSON, 3 tool results, 1 attachment)"
ONE_TEXT = f"one-text messages only ({SIZE} characters each)"


def _text(i: int, size: int = SIZE) -> str:
    return (f"{i:06d} " + _FILLER * (size // len(_FILLER) + 1))[:size]


def _arguments(i: int) -> str:
    # Raw, as a model writes it: its own key order and spacing, a duplicate key, a big number.
    return (
        f'{{"path": "src/module_{i}.py",  "query":"find usages of handler {i}", "limit":20,'
        f' "options": {{"regex": false, "context": 3}}, "limit": 25, "token": 1e400}}'
    )


def agent_messages(n: int) -> list[Message]:
    """The first ``n`` messages of the agent conversation, as ``storetest`` messages."""
    out: list[Message] = []
    for i in range(n):
        step = i % 10
        if step == 0:
            out.append(Message.text("user", _text(i, 300)))
        elif step in (1, 3, 7):
            out.append(Message("assistant", (ToolCall(f"call_{i}", "search_code", _arguments(i)),)))
        elif step in (2, 4, 8):
            out.append(Message("tool", (ToolResult(f"call_{i - 1}", _text(i), False),)))
        elif step == 6:
            out.append(Message("user", (Text(_text(i, 200)), Attachment("image/png", _IMAGE))))
        else:
            out.append(Message.text("assistant", _text(i)))
    return out


def one_text_messages(n: int) -> list[Message]:
    """``n`` one-text messages, user and assistant taking turns."""
    roles: tuple[Role, Role] = ("user", "assistant")
    return [Message.text(roles[i % 2], _text(i)) for i in range(n)]


def as_agents_item(message: Message) -> dict[str, Any]:
    """The OpenAI Agents SDK's input item for ``message`` (what its sessions store)."""
    (first, *rest) = message.content
    if isinstance(first, ToolCall):
        return {"type": "function_call", "call_id": first.id, "name": first.name, "arguments": first.arguments}
    if isinstance(first, ToolResult):
        return {"type": "function_call_output", "call_id": first.call_id, "output": first.content}
    if not rest and isinstance(first, Text):
        return {"role": message.role, "content": first.text}
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, Text):
            parts.append({"type": "input_text", "text": part.text})
        elif isinstance(part, Attachment):
            data = base64.b64encode(part.data).decode("ascii")
            url = f"data:{part.media_type};base64,{data}"
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return {"role": message.role, "content": parts}


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"


_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_durability(conn: sqlite3.Connection) -> str:
    """``journal_mode`` and ``synchronous`` as ``conn`` reports them."""
    (journal,) = conn.execute("PRAGMA journal_mode").fetchone()
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    return durability_line(journal, level)


def durability_line(journal: object, level: object) -> str:
    """The line :func:`sqlite_durability` prints, from the two PRAGMAs' values."""
    return f"journal_mode={journal}, synchronous={_SYNCHRONOUS.get(level, level)}"


def server_durability(backend: str, url: str) -> str:
    """The server's durability settings, as it reports them."""
    return ", ".join(f"{name}={value}" for name, value in databases.durability(backend, url).items())
