"""The in-memory log store: entry logs (:mod:`storetest.entries`) that live as long as
the process, shared by every handle on one :class:`MemoryLogBackend`.

How it keeps each clause of the log contract:

- Atomic batches, exclusive creates, appends that never lose a concurrent writer's
  entries: every method checks and writes with no ``await`` in between, so on one event
  loop each is a single step that no other task can interleave with.
- Duplicate ids and unknown parents: :func:`~storetest.entries.check_batch` against
  the session's id set, before anything is written.
- Exact values: entries are frozen and kept as given (times, offsets, custom JSON
  text included); ``entries()`` returns a new list each time.
- Append order: a list per session, never sorted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from storetest.contract import check_session_id
from storetest.entries import Entry, check_batch, check_create

__all__ = ["MemoryLogBackend", "MemoryLogStore"]


@dataclass
class MemoryLogBackend:
    """The data itself. Two :class:`MemoryLogStore` handles on one backend are replicas."""

    logs: dict[str, list[Entry]] = field(default_factory=dict)
    ids: dict[str, set[str]] = field(default_factory=dict)

    def write(self, session: str, batch: Sequence[Entry]) -> None:
        """Append a checked batch."""
        self.logs.setdefault(session, []).extend(batch)
        self.ids.setdefault(session, set()).update(e.id for e in batch)


class MemoryLogStore:
    """An async log store holding everything in a :class:`MemoryLogBackend`."""

    def __init__(self, backend: MemoryLogBackend | None = None) -> None:
        self.backend = backend if backend is not None else MemoryLogBackend()

    def replica(self) -> MemoryLogStore:
        """Another handle on the same data."""
        return type(self)(self.backend)

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_batch(session, entries, self.backend.ids.get(session, ()))
        if batch:
            self.backend.write(session, batch)

    async def entries(self, session: str) -> list[Entry]:
        session = check_session_id(session)
        return list(self.backend.logs.get(session, ()))

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        session = check_session_id(session)
        batch = check_create(session, entries)
        if self.backend.logs.get(session):
            return False
        self.backend.write(session, batch)
        return True
