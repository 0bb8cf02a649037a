"""The entry-log contract: durable sessions kept as a flat, append-only log of entries.

A session is a list of :class:`Entry` values in the order they were appended. Each
entry names its parent (``None`` for a root; a session may have several roots), so the
parent pointers make the log a tree: editing a question, retrying or rewinding attaches
the next entry to an earlier one, and nothing is ever overwritten or removed. What the
model reads, what a transcript shows, forks and compactions are computed from the log
by :mod:`storetest.projections`; a log store only keeps entries.

The decisions a store author must keep (each is checked by a log clause):

- An entry is an id (a non-empty string, unique within its session), a parent id, a
  creation time and a kind with its payload. Entry ids are unique per *session*, not
  per backend: a fork copies entries, ids included, into a new session.
- Creation times are aware datetimes kept exactly: the instant to the microsecond and
  the UTC offset (``+02:00`` comes back ``+02:00``, not ``+00:00``). Offsets are whole
  minutes, as ISO 8601 writes them; a named zone (``ZoneInfo``) is kept as its offset
  at that moment, which is all a stored timestamp can carry.
- Kinds, their payloads, and who reads each (the durable handle applies the audiences):

  - ``message``: a :class:`Message`; the model reads it, the transcript shows it.
  - ``meta``: a :class:`Message`; the model reads it, the transcript hides it.
  - ``custom``: :class:`Custom` (an application kind and JSON text); the model never
    reads it, the transcript shows it.
  - ``compaction``: :class:`Compaction`; the model reads its summary in place of the
    path before its first kept entry; the transcript hides it.

  The store keeps every kind alike. Ephemeral content (the model reads it once) is not an entry kind: it never reaches a
  store. Custom data is raw JSON text kept byte for byte (never parsed and re-encoded).
- ``append(session, entries)`` writes a batch atomically (all of it or none of it,
  and no reader sees half of it), creating the session if it is new. A batch is refused
  with ``ValueError`` naming the entry, and nothing of it written, when an id is already
  in the session or twice in the batch, or a parent is neither in the session nor
  earlier in the batch. :func:`check_batch` makes those checks; a store calls it inside
  the same transaction (or under the same lock) as the write.
- ``entries(session)`` returns every entry in append order (not sorted by time: clocks
  of two replicas disagree), ``[]`` for a session never used. The list is the caller's.
- ``create(session, entries)`` appends a non-empty batch only if the session has no
  entries, returning ``True`` if it wrote and ``False`` (writing nothing) otherwise. Of
  two racing creates exactly one returns ``True``.
- Two writers appending to one session at once both land (their entries become
  siblings or interleave, whole batch by whole batch); neither overwrites the other.
- Optionally ``fork(session, new_session, leaf_id)``: copy the path from a root to
  ``leaf_id`` (the session's last entry when ``None``) into ``new_session`` as one
  :meth:`create` would; return ``False`` if ``new_session`` has entries. A store
  provides it only to do it faster (one ``INSERT ... SELECT`` over a recursive CTE);
  without it :func:`storetest.projections.fork` reads and creates.

Standard library only, like :mod:`storetest.contract`.
"""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Final, Literal, Protocol, runtime_checkable

from storetest.contract import MAX_ID_BYTES, MAX_NAME_BYTES, Message, _check_encodable, _check_size

__all__ = [
    "KINDS",
    "Compaction",
    "Custom",
    "Entry",
    "EntryKind",
    "LogStore",
    "SessionExists",
    "SyncLogStore",
    "check_batch",
    "check_create",
    "check_entries",
    "check_entry_id",
]

EntryKind = Literal["message", "meta", "custom", "compaction"]
KINDS: Final = ("message", "meta", "custom", "compaction")


class SessionExists(ValueError):
    """A fork's new session already has entries; nothing was written to it."""


def check_entry_id(value: object, what: str = "id", limit: int = MAX_ID_BYTES) -> str:
    """Return ``value`` if it can be an entry id: a non-empty string of valid Unicode, at
    most ``limit`` (:data:`~storetest.contract.MAX_ID_BYTES`) bytes of UTF-8.

    :raises TypeError: it is not a ``str``.
    :raises ValueError: it is empty, holds a lone surrogate, or is too long.
    """
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    _check_encodable(what, value)
    _check_size(what, value, limit)
    return value


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, not {type(value).__name__}")
    _check_encodable(what, value)
    return value


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _check_json(value: object, what: str) -> str:
    text = _check_text(value, what)
    try:
        # Parse only to validate: numbers stay unconverted (1e400 is valid JSON).
        json.loads(text, parse_float=str, parse_int=str, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ValueError(f"{what} must be JSON text (RFC 8259): {exc}") from None
    return text


@dataclass(frozen=True, slots=True)
class Custom:
    """An application record (an artifact, a UI state): the model never reads it.

    ``kind`` is the application's name for it (``"artifact"``); ``data`` is JSON text,
    which stores keep byte for byte: key order, duplicate keys, whitespace, number
    spelling and escapes come back exactly as given.
    """

    kind: str
    data: str

    def __post_init__(self) -> None:
        check_entry_id(self.kind, "Custom.kind", MAX_NAME_BYTES)
        _check_json(self.data, "Custom.data")


@dataclass(frozen=True, slots=True)
class Compaction:
    """A summary of the path before ``first_kept_id``: the model reads the summary, then
    the path from ``first_kept_id`` on. Nothing is removed from the log."""

    summary: str
    first_kept_id: str

    def __post_init__(self) -> None:
        _check_text(self.summary, "Compaction.summary")
        check_entry_id(self.first_kept_id, "Compaction.first_kept_id")


Payload = Message | Custom | Compaction
_PAYLOADS: Final[dict[str, type]] = {
    "message": Message,
    "meta": Message,
    "custom": Custom,
    "compaction": Compaction,
}


def _check_created(value: object) -> datetime:
    if type(value) is datetime and value.tzinfo is UTC and not value.fold:
        # The common time, datetime.now(UTC): already nothing but an instant and offset 0.
        return value
    if not isinstance(value, datetime):
        raise TypeError(f"Entry.created_at must be datetime, not {type(value).__name__}")
    offset = value.utcoffset()
    if offset is None:
        raise ValueError(
            f"Entry.created_at must be timezone-aware (naive {value.isoformat()} would be read "
            "as local time by one replica and UTC by another); use datetime.now(timezone.utc)"
        )
    if offset % timedelta(minutes=1):
        raise ValueError(f"Entry.created_at has a UTC offset of {offset}; offsets are whole minutes")
    # Keep the instant and the offset, nothing a stored timestamp cannot carry (a zone's
    # rules, a subclass, ``fold``): what comes back from a store then compares equal.
    return datetime(
        value.year, value.month, value.day, value.hour, value.minute, value.second,
        value.microsecond, timezone(offset),
    )


@dataclass(frozen=True, slots=True, eq=False)
class Entry:
    """One entry of a session's log. Frozen: a store may keep a reference to it.

    Make one with :meth:`message`, :meth:`meta`, :meth:`custom` or :meth:`compaction`.
    Two entries are equal when every field is, the creation time's UTC offset included
    (plain ``datetime`` equality ignores the offset).

    :param id: unique within the session; never empty.
    :param parent_id: the entry this one follows, or ``None`` for a root.
    :param created_at: an aware datetime; kept as its instant and UTC offset.
    :param kind: ``"message"``, ``"meta"``, ``"custom"`` or ``"compaction"``.
    :param payload: a :class:`Message` (message, meta), :class:`Custom` or :class:`Compaction`.
    :raises TypeError, ValueError: a field is of the wrong type or value, naming it.
    """

    id: str
    parent_id: str | None
    created_at: datetime
    kind: EntryKind
    payload: Payload

    def __post_init__(self) -> None:
        check_entry_id(self.id, "Entry.id")
        if self.parent_id is not None:
            check_entry_id(self.parent_id, "Entry.parent_id")
            if self.parent_id == self.id:
                raise ValueError(f"entry {self.id!r} cannot be its own parent")
        object.__setattr__(self, "created_at", _check_created(self.created_at))
        if not isinstance(self.kind, str):
            raise TypeError(f"Entry.kind must be str, not {type(self.kind).__name__}")
        if self.kind not in _PAYLOADS:
            raise ValueError(f"Entry.kind must be one of {list(KINDS)}, not {self.kind!r}")
        expected = _PAYLOADS[self.kind]
        if not isinstance(self.payload, expected):
            raise TypeError(
                f"Entry.payload of a {self.kind!r} entry must be {expected.__name__}, "
                f"not {type(self.payload).__name__}"
            )

    def _key(self) -> tuple[object, ...]:
        return (self.id, self.parent_id, self.created_at, self.created_at.utcoffset(),
                self.kind, self.payload)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @classmethod
    def message(cls, id: str, parent_id: str | None, created_at: datetime, message: Message) -> Entry:
        """A message the model reads and the transcript shows."""
        return cls(id, parent_id, created_at, "message", message)

    @classmethod
    def meta(cls, id: str, parent_id: str | None, created_at: datetime, message: Message) -> Entry:
        """A message the model reads and the transcript hides (a system note, a reminder)."""
        return cls(id, parent_id, created_at, "meta", message)

    @classmethod
    def custom(cls, id: str, parent_id: str | None, created_at: datetime, kind: str, data: str) -> Entry:
        """An application record of ``kind`` holding JSON text ``data``; the model never reads it."""
        return cls(id, parent_id, created_at, "custom", Custom(kind, data))

    @classmethod
    def compaction(
        cls, id: str, parent_id: str | None, created_at: datetime, summary: str, first_kept_id: str
    ) -> Entry:
        """A summary standing, for the model, for the path before ``first_kept_id``."""
        return cls(id, parent_id, created_at, "compaction", Compaction(summary, first_kept_id))


def check_entries(entries: object) -> tuple[Entry, ...]:
    """Return ``entries`` as a tuple if every item is an :class:`Entry`, else raise.

    :raises TypeError: ``entries`` is not a sequence of ``Entry``, naming the item.
    """
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence):
        raise TypeError(f"entries must be a sequence of Entry, not {type(entries).__name__}")
    items = tuple(entries)
    for i, entry in enumerate(items):
        if not isinstance(entry, Entry):
            raise TypeError(f"entries[{i}] must be Entry, not {type(entry).__name__}")
    return items


def check_batch(session: str, entries: object, existing: Container[str]) -> tuple[Entry, ...]:
    """Check a batch before appending it to ``session``, whose ids are ``existing``.

    Call it where the write happens (in the transaction, under the lock), so the ids it
    checks against cannot change before the batch lands; on any error write nothing.
    ``existing`` only needs ``in``: a set, a dict, or an object that looks ids up.

    :returns: the batch as a tuple.
    :raises TypeError: ``entries`` is not a sequence of :class:`Entry`.
    :raises ValueError: an id is already in the session or twice in the batch, or a
        parent is neither in the session nor earlier in the batch; the message names
        the session, the entry and its index in the batch.
    """
    batch = check_entries(entries)
    seen: set[str] = set()
    for i, entry in enumerate(batch):
        if entry.id in seen:
            raise ValueError(
                f"session {session!r}: entries[{i}] has id {entry.id!r}, which is twice in the batch; "
                "entry ids are unique within a session"
            )
        if entry.id in existing:
            raise ValueError(
                f"session {session!r}: entries[{i}] has id {entry.id!r}, which the session already "
                "has; entry ids are unique within a session"
            )
        parent = entry.parent_id
        if parent is not None and parent not in seen and parent not in existing:
            raise ValueError(
                f"session {session!r}: entries[{i}] (id {entry.id!r}) has parent {parent!r}, which "
                "is neither in the session nor earlier in the batch"
            )
        seen.add(entry.id)
    return batch


def check_create(session: str, entries: object) -> tuple[Entry, ...]:
    """Check a batch for :meth:`LogStore.create`: non-empty and standing on its own
    (every parent earlier in the batch), since it goes into an empty session.

    :raises TypeError, ValueError: as :func:`check_batch`, or the batch is empty.
    """
    batch = check_batch(session, entries, ())
    if not batch:
        raise ValueError(f"session {session!r}: create needs at least one entry")
    return batch


@runtime_checkable
class LogStore(Protocol):
    """A backend holding many sessions' entry logs. See the module docstring for the
    contract; every method checks its arguments before touching the backend
    (:func:`~storetest.contract.check_session_id`, :func:`check_batch`)."""

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        """Append a batch atomically, creating the session if new.

        :raises ValueError: a duplicate id or an unknown parent (nothing written).
        """

    async def entries(self, session: str) -> list[Entry]:
        """Every entry in append order; ``[]`` for a session never used."""

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        """Append a non-empty batch only if the session has no entries.

        :returns: ``True`` if written, ``False`` if the session already had entries.
        """


class SyncLogStore(Protocol):
    """The same contract as :class:`LogStore` with plain methods; the suite drives it
    from threads where ``LogStore`` is driven from tasks."""

    def append(self, session: str, entries: Sequence[Entry]) -> None: ...
    def entries(self, session: str) -> list[Entry]: ...
    def create(self, session: str, entries: Sequence[Entry]) -> bool: ...
