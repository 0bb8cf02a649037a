"""The in-memory store: lives as long as the process, shared by every handle on one
:class:`MemoryBackend`. The smallest correct store, and the model the others copy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from storetest.contract import (
    Message,
    check_messages,
    check_session_id,
    check_steer_text,
)

__all__ = ["MemoryBackend", "MemoryStore"]


@dataclass
class MemoryBackend:
    """The data itself. Two :class:`MemoryStore` handles on one backend are replicas."""

    transcripts: dict[str, tuple[Message, ...]] = field(default_factory=dict)
    steers: dict[str, list[str]] = field(default_factory=dict)


class MemoryStore:
    """An async store holding everything in a :class:`MemoryBackend`.

    Every method runs without an ``await`` between reading and writing, so on one
    event loop each is atomic with no lock at all. Transcripts are kept as tuples of
    frozen messages, so nothing a caller holds can change what is stored.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        self.backend = backend if backend is not None else MemoryBackend()

    def replica(self) -> MemoryStore:
        """Another handle on the same data."""
        return MemoryStore(self.backend)

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        self.backend.transcripts[session] = check_messages(messages)

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        return list(self.backend.transcripts.get(session, ()))

    async def add_steer(self, session: str, text: str) -> None:
        session = check_session_id(session)
        self.backend.steers.setdefault(session, []).append(check_steer_text(text))

    async def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        return self.backend.steers.pop(session, [])
