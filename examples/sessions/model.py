"""A scripted model: deterministic, no network, and as strict as a real provider about
what a request must end with.

It answers from what is in the conversation and nothing else: it reads the file a
user message points it at (``lease.go`` once somebody mentions the lease expiry,
``token.go`` otherwise), answers from what the tool returned, and answers a follow-up
from a tool result earlier in the transcript, even one another process produced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from storetest import Message, Text, ToolCall, ToolResult

#: What the provider says when a request ends with the assistant's own message.
PREFILL_REFUSED = (
    "400: This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)

FILES = {
    "lease.go": (
        "package lease\n"
        "\n"
        "func renewLease(l *Lease, now time.Time) (*Lease, error) {\n"
        "\tif now.After(l.Expiry) {\n"
        "\t\treturn nil, nil // expired: no lease, and no error either\n"
        "\t}\n"
        "\tif l.Token == \"\" {\n"
        "\t\treturn nil, ErrTokenExpired\n"
        "\t}\n"
        "\treturn &Lease{Token: l.Token, Expiry: now.Add(ttl)}, nil\n"
        "}\n"
    ),
    "token.go": (
        "package lease\n"
        "\n"
        "func validToken(t string) bool { return t != \"\" }\n"
    ),
}


class PrefillRefused(Exception):
    """The request ended with an assistant message (see :data:`PREFILL_REFUSED`)."""


class Model(Protocol):
    def reply(self, messages: Sequence[Message]) -> Message: ...


def read_file(arguments: str) -> str:
    """The ``read_file`` tool: ``{"path": ...}`` in, the file's text out."""
    path = json.loads(arguments)["path"]
    return FILES.get(path, f"no such file: {path}")


TOOLS = {"read_file": read_file}


def _texts(message: Message) -> str:
    return " ".join(p.text for p in message.content if isinstance(p, Text))


class ScriptedModel:
    """Stands in for the LLM: the same conversation always gets the same reply."""

    def reply(self, messages: Sequence[Message]) -> Message:
        if not messages or messages[-1].role == "assistant":
            raise PrefillRefused(PREFILL_REFUSED)
        calls = [p for m in messages for p in m.content if isinstance(p, ToolCall)]
        results = {p.call_id: p.content for m in messages for p in m.content if isinstance(p, ToolResult)}
        last = messages[-1]
        if last.role == "tool":
            path = json.loads(calls[-1].arguments)["path"]
            if path == "lease.go":
                return Message.text("assistant", "renewLease returns a nil lease when the lease has expired, "
                                    "and no error, so the caller blames the token.")
            return Message.text("assistant", "validToken looks right to me; I found nothing wrong with the token.")
        question = _texts(last)
        if "which line" in question and calls:
            call = calls[-1]
            path = json.loads(call.arguments)["path"]
            for number, line in enumerate(results.get(call.id, "").splitlines(), start=1):
                if "ErrTokenExpired" in line:
                    return Message.text("assistant", f"line {number} of {path}: `{line.strip()}`, "
                                        "reached only while the lease is still valid.")
            return Message.text("assistant", f"no line of {path} returns the token error.")
        steered = any("lease expiry" in _texts(m) for m in messages if m.role == "user")
        path = "lease.go" if steered else "token.go"
        arguments = json.dumps({"path": path})
        return Message("assistant", (ToolCall(f"call_{len(calls) + 1}", "read_file", arguments),))
