"""storetest: a conformance suite for agent-session stores.

A store author's whole test file::

    from storetest import run_conformance
    from mystore import MyStore

    run_conformance(lambda: MyStore())

The contract (messages, the ``Store`` protocol, sessions, argument checks) and the
codec import nothing beyond the standard library; ``run_conformance`` pulls in pytest
and Hypothesis only when it is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storetest.codec import CodecError, decode_message, decode_messages, encode_message, encode_messages
from storetest.contract import (
    MAX_SESSION_ID_BYTES,
    ROLES,
    Attachment,
    Content,
    Message,
    OutcomeUnknown,
    Role,
    Session,
    Store,
    StoreError,
    SyncStore,
    Text,
    ToolCall,
    ToolResult,
    check_messages,
    check_session_id,
    check_steer_text,
    open_session,
)

if TYPE_CHECKING:
    from storetest.clauses import ConformanceFailure
    from storetest.plugin import run_conformance

__all__ = [
    "MAX_SESSION_ID_BYTES",
    "ROLES",
    "Attachment",
    "CodecError",
    "ConformanceFailure",
    "Content",
    "Message",
    "OutcomeUnknown",
    "Role",
    "Session",
    "Store",
    "StoreError",
    "SyncStore",
    "Text",
    "ToolCall",
    "ToolResult",
    "check_messages",
    "check_session_id",
    "check_steer_text",
    "decode_message",
    "decode_messages",
    "encode_message",
    "encode_messages",
    "open_session",
    "run_conformance",
]


def __getattr__(name: str) -> Any:
    # Deferred so that a store depending on the contract does not import pytest.
    if name == "run_conformance":
        from storetest.plugin import run_conformance

        return run_conformance
    if name == "ConformanceFailure":
        from storetest.clauses import ConformanceFailure

        return ConformanceFailure
    raise AttributeError(f"module 'storetest' has no attribute {name!r}")
