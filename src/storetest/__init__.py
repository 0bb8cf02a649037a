"""storetest: a conformance suite for agent-session stores.

A store author's whole test file::

    from storetest import run_conformance
    from mystore import MyStore

    run_conformance(lambda: MyStore())

Or, without pytest, ``storetest.check(lambda: MyStore())`` returns a :class:`Report`
with every clause's verdict and every violation.

The contract (messages, the ``Store`` protocol, sessions, argument checks) and the
codec import nothing beyond the standard library; ``run_conformance`` and ``check``
pull in Hypothesis (and pytest) only when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storetest.codec import (
    CodecError,
    decode_message,
    decode_messages,
    decode_trusted,
    decode_trusted_json,
    encode_message,
    encode_messages,
    trusted_text_message,
    trusted_tool_call_message,
    trusted_tool_result_message,
)
from storetest.contract import (
    MAX_ID_BYTES,
    MAX_NAME_BYTES,
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
    from storetest._engine.failures import ConformanceFailure, Violation
    from storetest.bindings.adk import adk_sessions
    from storetest.bindings.agent_framework import history_providers
    from storetest.bindings.agent_framework_sessions import session_stores
    from storetest.bindings.langchain import chat_histories
    from storetest.bindings.langgraph import checkpointers
    from storetest.bindings.llama_index import llama_index_chat_stores, llama_index_db_chat_stores
    from storetest.bindings.openai_agents import item_sessions, owned
    from storetest.plugin import run_conformance
    from storetest.results import ClauseResult, Interrupted, Report
    from storetest.runner import check

__all__ = [
    "MAX_ID_BYTES",
    "MAX_NAME_BYTES",
    "MAX_SESSION_ID_BYTES",
    "ROLES",
    "Attachment",
    "ClauseResult",
    "CodecError",
    "ConformanceFailure",
    "Content",
    "Interrupted",
    "Message",
    "OutcomeUnknown",
    "Report",
    "Role",
    "Session",
    "Store",
    "StoreError",
    "SyncStore",
    "Text",
    "ToolCall",
    "ToolResult",
    "Violation",
    "adk_sessions",
    "chat_histories",
    "check",
    "check_messages",
    "check_session_id",
    "check_steer_text",
    "checkpointers",
    "decode_message",
    "decode_messages",
    "decode_trusted",
    "decode_trusted_json",
    "encode_message",
    "encode_messages",
    "history_providers",
    "item_sessions",
    "llama_index_chat_stores",
    "llama_index_db_chat_stores",
    "open_session",
    "owned",
    "run_conformance",
    "session_stores",
    "trusted_text_message",
    "trusted_tool_call_message",
    "trusted_tool_result_message",
]


_LAZY = {
    "run_conformance": "storetest.plugin",
    "check": "storetest.runner",
    "Report": "storetest.results",
    "ClauseResult": "storetest.results",
    "Interrupted": "storetest.results",
    "ConformanceFailure": "storetest._engine.failures",
    "Violation": "storetest._engine.failures",
    "item_sessions": "storetest.bindings.openai_agents",
    "chat_histories": "storetest.bindings.langchain",
    "owned": "storetest.bindings.openai_agents",
    "adk_sessions": "storetest.bindings.adk",
    "checkpointers": "storetest.bindings.langgraph",
    "history_providers": "storetest.bindings.agent_framework",
    "session_stores": "storetest.bindings.agent_framework_sessions",
    "llama_index_chat_stores": "storetest.bindings.llama_index",
    "llama_index_db_chat_stores": "storetest.bindings.llama_index",
}


def __getattr__(name: str) -> Any:
    # Deferred so that a store depending on the contract does not import pytest or Hypothesis.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'storetest' has no attribute {name!r}")
