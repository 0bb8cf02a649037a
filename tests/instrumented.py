"""Correct stores that record every value the suite sends them, cell by cell of the
input model (:mod:`storetest._engine.inputs`): what ``scripts/coverage_table.py``
reports and ``tests/test_coverage.py`` asserts.

``measure(seed)`` runs the default profile's clauses against the in-memory transcript
store and the in-memory ADK service, both instrumented, and returns each cell's hits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from reference_stores.memory import MemoryStore
from storetest import adk_sessions, check
from storetest._engine.inputs import Cell, Coverage
from storetest.clauses import CLAUSES
from storetest.contract import Attachment, Message, Text, ToolCall, ToolResult
from tests.adk_services import MemorySessionService

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
        return made


def _replica(primary: InstrumentedStore) -> InstrumentedStore:
    return primary.replica()


def measure(seed: int) -> Counter[Cell]:
    """Every cell's hits in one default-profile run of each instrumented store, every
    clause but the races and those in child processes (they send small fixed values
    and their recordings would not reach this process: leaving them out can only
    under-count, so a cell reached here is reached by the whole check).

    :raises AssertionError: a clause failed on a correct store (a false alarm).
    """
    CURRENT.append(Coverage())
    try:
        clauses = [c.name for c in CLAUSES if not c.races and not c.processes]
        runs = [check(InstrumentedStore, _replica, clauses=clauses, seed=seed, name="instrumented memory"),
                check(adk_sessions(InstrumentedADK), clauses=clauses, seed=seed, name="instrumented adk")]
        for report in runs:
            failed = [r.clause for r in report.results if r.outcome == "failed"]
            assert not failed, f"seed {seed}: a correct store failed {failed}"
        return CURRENT[-1].finish()
    finally:
        CURRENT.pop()
