"""Correct stores that record every value the suite sends them, cell by cell of the
input model (:mod:`storetest._engine.inputs`): what ``scripts/coverage_table.py``
reports and ``tests/test_coverage.py`` asserts.

``measure(seed)`` runs the default profile's clauses against the in-memory transcript
store, entry log, item history, LangChain chat history and ADK service, each
instrumented, and returns each cell's hits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reference_stores.memory import MemoryStore
from reference_stores.memory_log import MemoryLogBackend, MemoryLogStore
from storetest import adk_sessions, chat_histories, check, item_sessions
from storetest._engine.inputs import Cell, Coverage
from storetest.clauses import CLAUSES
from storetest.contract import Attachment, Message, Text, ToolCall, ToolResult
from storetest.entries import Custom, Entry
from tests.adk_services import MemorySessionService
from tests.broken_stores.chat_variants import MemoryChatHistory
from tests.item_histories import MemorySession, backend_for

__all__ = ["InstrumentedADK", "InstrumentedStore", "measure"]

#: The Coverage the instrumented stores record into (one per measure()).
CURRENT: list[Coverage] = []


def _cov() -> Coverage:
    return CURRENT[-1]


def _record(session: str, messages: Sequence[Message]) -> None:
    cov = _cov()
    cov.value("transcripts", "session id", session)
    if isinstance(messages, (list, tuple)):
        cov.transcript("transcripts", len(messages))
    for message in messages if isinstance(messages, (list, tuple)) else ():
        for part in message.content if isinstance(message, Message) else ():
            if isinstance(part, Text):
                cov.value("transcripts", "message text", part.text)
            elif isinstance(part, ToolCall):
                cov.value("transcripts", "call id", part.id)
                cov.value("transcripts", "tool name", part.name)
                cov.value("transcripts", "arguments", part.arguments)
            elif isinstance(part, ToolResult):
                cov.value("transcripts", "call id", part.call_id)
                cov.value("transcripts", "tool result", part.content)
            elif isinstance(part, Attachment):
                cov.value("transcripts", "media type", part.media_type)
                cov.value("transcripts", "attachment data", part.data)


class InstrumentedStore(MemoryStore):
    """The in-memory reference store, recording what it is sent."""

    def replica(self) -> InstrumentedStore:
        return InstrumentedStore(self.backend)

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        await super().save(session, messages)  # refused input is not recorded
        _record(session, messages)

    async def messages(self, session: str) -> list[Message]:
        got = await super().messages(session)
        _cov().value("transcripts", "session id", session)
        return got

    async def add_steer(self, session: str, text: str) -> None:
        await super().add_steer(session, text)
        _cov().value("transcripts", "session id", session)
        _cov().value("transcripts", "steer text", text)

    async def take_steers(self, session: str) -> list[str]:
        got = await super().take_steers(session)
        _cov().take("transcripts", got)
        return got


class InstrumentedADK(MemorySessionService):
    """The in-memory ADK service of ``tests/adk_services.py``, recording (app, user, session)."""

    async def create_session(self, *, app_name: str, user_id: str, state: Any = None, session_id: Any = None) -> Any:
        made = await super().create_session(app_name=app_name, user_id=user_id, state=state, session_id=session_id)
        _cov().place(app_name, user_id, made.id)
        _cov().value("adk", "session id", made.id)
        _record_state(state)
        return made


    async def append_event(self, session: Any, event: Any) -> Any:
        done = await super().append_event(session, event)
        _record_event(event)
        return done


def _record_state(state: Any) -> None:
    for key, value in (state or {}).items():
        if isinstance(key, str):
            _cov().value("adk", "state key", key)
        if isinstance(value, str):
            _cov().value("adk", "state value", value)


def _record_event(event: Any) -> None:
    parts = event.content.parts if event.content is not None and event.content.parts else []
    for part in parts:
        if isinstance(part.text, str):
            _cov().value("adk", "event text", part.text)
    _record_state(event.actions.state_delta if event.actions is not None else None)


def _record_entries(session: str, batch: Any, total: int) -> None:
    cov = _cov()
    cov.value("entry logs", "session id", session)
    cov.batch("entry logs", "entries", "entries", len(batch), total)
    for entry in batch:
        if not isinstance(entry, Entry):
            continue
        cov.value("entry logs", "entry id", entry.id)
        if isinstance(entry.payload, Message):
            for part in entry.payload.content:
                if isinstance(part, Text):
                    cov.value("entry logs", "message text", part.text)
        elif isinstance(entry.payload, Custom):
            cov.value("entry logs", "custom kind", entry.payload.kind)
            cov.value("entry logs", "custom data", entry.payload.data)


class InstrumentedLogBackend(MemoryLogBackend):
    """The in-memory log store's data, recording each checked batch written."""

    def write(self, session: str, batch: Any) -> None:
        super().write(session, batch)
        _record_entries(session, batch, len(self.logs[session]))


def instrumented_log() -> MemoryLogStore:
    return MemoryLogStore(InstrumentedLogBackend())


class InstrumentedItems(MemorySession):
    """The in-memory item history of ``tests/item_histories.py``, recording what it is sent."""

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        cov = _cov()
        cov.value("item histories", "session id", self.session_id)
        cov.batch("item histories", "items", "items", len(items), len(self.items))
        for item in items:
            if isinstance(item, dict):
                if isinstance(item.get("content"), str):
                    cov.value("item histories", "message content", item["content"])
                if isinstance(item.get("arguments"), str):
                    cov.value("item histories", "arguments", item["arguments"])


async def instrumented_items(tmp_path: Path) -> Any:
    backend = backend_for(tmp_path)
    return lambda session_id: InstrumentedItems(backend, session_id)


class InstrumentedChat(MemoryChatHistory):
    """The correct in-memory LangChain chat history, recording what it is sent."""

    def add_messages(self, messages: Sequence[Any]) -> None:
        super().add_messages(messages)
        cov = _cov()
        cov.value("chat histories", "session id", self.session_id)
        cov.batch("chat histories", "messages", "messages", len(messages), len(self.histories[self.session_id]))
        for message in messages:
            if isinstance(message.content, str):
                cov.value("chat histories", "message content", message.content)
            for call in message.additional_kwargs.get("tool_calls") or ():
                arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                if isinstance(arguments, str):
                    cov.value("chat histories", "tool call arguments", arguments)


def instrumented_chat(tmp_path: Path) -> Any:
    return lambda session_id: InstrumentedChat(tmp_path, session_id)


def _replica(primary: InstrumentedStore) -> InstrumentedStore:
    return primary.replica()


def _log_replica(primary: MemoryLogStore) -> MemoryLogStore:
    return primary.replica()


def measure(seed: int, profile: str | None = None) -> Counter[Cell]:
    """Every cell's hits in one run of each instrumented store (the default profile, or
    ``profile``), every clause but the races, those in child processes and the state
    machines (they send small fixed or random values, and the children's recordings
    would not reach this process: leaving them out can only under-count, so a cell
    reached here is reached by the whole check).

    :raises AssertionError: a clause failed on a correct store (a false alarm).
    """
    CURRENT.append(Coverage())
    try:
        clauses = [c.name for c in CLAUSES
                   if not c.races and not c.processes and not c.name.endswith("_matches_model")]
        stores = [("memory", InstrumentedStore, _replica), ("adk", adk_sessions(InstrumentedADK), None),
                  ("log", instrumented_log, _log_replica), ("items", item_sessions(instrumented_items), None),
                  ("chat", chat_histories(instrumented_chat), None)]
        runs = [check(factory, replica, clauses=clauses, seed=seed, profile=profile, name=f"instrumented {name}")
                for name, factory, replica in stores]
        for report in runs:
            failed = [r.clause for r in report.results if r.outcome == "failed"]
            assert not failed, f"seed {seed}: a correct store failed {failed}"
        return CURRENT[-1].finish()
    finally:
        CURRENT.pop()
