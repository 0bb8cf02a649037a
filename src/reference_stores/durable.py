"""The durable session handle: an agent's conversation bound to one session id on a log
store (:mod:`storetest.entries`), surviving restarts.

:meth:`DurableSession.open` creates the session or resumes it; a new process that opens
the same id rebuilds the same model history (:meth:`~DurableSession.model_messages`).
The handle tracks one leaf, where the next entry attaches, and offers what the second
seed lists: append entries, branch to an entry (edit, retry, rewind), fork the active
path into a new id, compact (summarize, remove nothing), and a model run whose input is
stored before the model is called and whose every produced message is stored as it
ends.

One turn, four audiences (the seed's table)::

    item                       model reads  store keeps  transcript shows
    Message                    yes          yes          yes
    Meta(message)              yes          yes          no
    Ephemeral(message)         yes, once    no           no
    Custom(kind, json)         no           yes          yes

Ephemeral content is handed to the model by :meth:`~DurableSession.run` (after the
history and the run's input) and never to the store: no entry, no id.

Decisions taken here:

- A branch is stored, so that a new process continues from it: a custom entry of kind
  :data:`BRANCH_KIND` whose parent is the entry branched to (its data names the leaf
  left behind). It is a leaf of its own that nothing attaches to; the model never reads
  it, a transcript shows it (the edit happened). A resumed handle whose last entry is
  such a marker continues from the marker's parent.
- Lifecycle events go to a publisher (a plain or async callable taking an
  :class:`Event`), only after the change is durable: the store call returned. If the
  store fails, the error propagates and nothing is published. ``session_init`` is
  heard when a handle opens an existing session, or when the first append creates a
  new one; ``branched``, ``forked`` and ``compacted`` after their writes. An error
  raised by the publisher reaches the caller, but the change is already stored.
- The first append to a new session uses ``create``; if another handle created the
  session first, the batch is re-attached to that session's leaf and appended.

The handle is for one agent's task at a time (not thread-safe, no concurrent calls);
a store's plain methods are called directly. Standard library only.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from storetest.contract import Message, check_session_id
from storetest.entries import Compaction, Custom, Entry, LogStore, SyncLogStore
from storetest.projections import fork as _fork
from storetest.projections import leaf_id, model_view, path, transcript_view

__all__ = [
    "BRANCH_KIND",
    "DurableSession",
    "Ephemeral",
    "Event",
    "EventKind",
    "Meta",
    "Model",
    "Publisher",
]

#: The custom-entry kind that records a branch (see the module docstring).
BRANCH_KIND: Final = "storetest.branch"

EventKind = Literal["session_init", "branched", "forked", "compacted"]


@dataclass(frozen=True, slots=True)
class Meta:
    """A message the model reads and the store keeps, hidden from the transcript."""

    message: Message


@dataclass(frozen=True, slots=True)
class Ephemeral:
    """A message the model reads once; the store never sees it."""

    message: Message


Item = Message | Meta | Ephemeral | Custom


@dataclass(frozen=True, slots=True)
class Event:
    """A session lifecycle change, published after it is durable.

    :param kind: ``session_init``, ``branched``, ``forked`` or ``compacted``.
    :param session: the session it happened to.
    :param leaf: the session's leaf afterwards.
    :param detail: ``session_init``: ``created`` (bool), ``entries`` (int);
        ``branched``: ``from`` (the leaf left); ``forked``: ``new_session``, ``entries``;
        ``compacted``: ``entry`` (the compaction's id), ``first_kept_id``.
    """

    kind: EventKind
    session: str
    leaf: str | None
    detail: dict[str, Any] = field(default_factory=dict)


Publisher = Callable[[Event], Awaitable[None] | None]
Model = Callable[[list[Message]], Any]
"""Takes what the model reads; returns its messages: a list, an iterable, an async
iterable (each message stored as it arrives), or an awaitable of a list."""


def _summary_message(summary: str) -> Message:
    return Message.text("user", f"The conversation before this point, summarized:\n{summary}")


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class DurableSession:
    """One session on a log store, as an agent holds it. Make one with :meth:`open`."""

    def __init__(
        self,
        store: LogStore | SyncLogStore,
        session_id: str,
        log: list[Entry],
        *,
        publisher: Publisher | None,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
        summary_message: Callable[[str], Message],
    ) -> None:
        self._store = store
        self._id = session_id
        self._log = log
        self._publisher = publisher
        self._clock = clock
        self._new_id = new_id
        self._summary_message = summary_message
        self._leaf = _resume_leaf(log)

    @classmethod
    async def open(
        cls,
        store: LogStore | SyncLogStore,
        session_id: str,
        *,
        publisher: Publisher | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        summary_message: Callable[[str], Message] = _summary_message,
    ) -> DurableSession:
        """Resume ``session_id`` from what the store holds, or start it (nothing is
        written until the first append).

        :param publisher: hears lifecycle :class:`Event`\\ s, after each change is durable.
        :param clock: creation times (aware datetimes); ``new_id``: entry ids.
        :param summary_message: the message the model reads for a compaction's summary.
        :raises TypeError, ValueError: a bad session id.
        """
        session_id = check_session_id(session_id)
        log = list(await _call(store.entries(session_id)))
        handle = cls(store, session_id, log, publisher=publisher, clock=clock, new_id=new_id,
                     summary_message=summary_message)
        if log:
            await handle._publish("session_init", created=False, entries=len(log))
        return handle

    # -- what the handle knows ------------------------------------------------------

    @property
    def id(self) -> str:
        """The session id."""
        return self._id

    @property
    def leaf(self) -> str | None:
        """Where the next entry attaches (``None`` before the first)."""
        return self._leaf

    @property
    def entries(self) -> list[Entry]:
        """The session's log as this handle knows it (a copy)."""
        return list(self._log)

    def model_messages(self) -> list[Message]:
        """What the model reads at the leaf: the path with its latest compaction applied
        (the summary as a message), meta included, custom records excluded."""
        if self._leaf is None:
            return []
        out: list[Message] = []
        for entry in model_view(self._log, self._leaf):
            if isinstance(entry.payload, Compaction):
                out.append(self._summary_message(entry.payload.summary))
            elif isinstance(entry.payload, Message):
                out.append(entry.payload)
        return out

    def transcript(self) -> list[Entry]:
        """What a transcript shows of the active path: messages and custom records."""
        return [] if self._leaf is None else transcript_view(self._log, self._leaf)

    # -- changes ----------------------------------------------------------------------

    async def append(self, *items: Message | Meta | Custom) -> list[Entry]:
        """Store items as one batch attached to the leaf (messages, meta, custom
        records); the last becomes the leaf. Returns the entries written.

        :raises TypeError: an item is ephemeral (never stored) or not an item.
        :raises StoreError: the store failed; nothing was published.
        """
        return await self._write_items(items)

    async def run(self, model: Model, *items: Item) -> list[Message]:
        """One model run: store the durable items, call ``model`` with what it reads
        (the history, then the ephemeral items), store each message it produces as it
        ends, and return them.

        :raises StoreError: the store failed (the run stops there).
        """
        await self._write_items([i for i in items if not isinstance(i, Ephemeral)])
        reads = self.model_messages() + [i.message for i in items if isinstance(i, Ephemeral)]
        produced: list[Message] = []
        result = await _call(model(reads))
        if isinstance(result, AsyncIterable):
            async for message in result:
                await self._write_items([message])
                produced.append(message)
        else:
            for message in result:
                await self._write_items([message])
                produced.append(message)
        return produced

    async def branch(self, entry_id: str) -> None:
        """Continue from ``entry_id`` (edit, retry, rewind): the next entry attaches to
        it. Stored as a marker entry (see the module docstring); publishes ``branched``.

        :raises ValueError: ``entry_id`` is not in the session.
        """
        if entry_id not in {e.id for e in self._log}:
            raise ValueError(f"session {self._id!r} has no entry {entry_id!r} to branch to")
        left = self._leaf
        marker = Entry.custom(self._new_id(), entry_id, self._clock(), BRANCH_KIND, json.dumps({"from": left}))
        await _call(self._store.append(self._id, [marker]))
        self._log.append(marker)
        self._leaf = entry_id
        await self._publish("branched", **{"from": left})

    async def fork(self, new_session_id: str) -> DurableSession:
        """Copy the active path into ``new_session_id`` (which must not exist) and
        return a handle on it, with this handle's publisher; publishes ``forked``.

        :raises SessionExists: ``new_session_id`` already has entries.
        :raises ValueError: this session has no entries yet.
        """
        if self._leaf is None:
            raise ValueError(f"session {self._id!r} has no entries to fork")
        copied = await _fork(self._store, self._id, new_session_id, self._leaf)
        forked = DurableSession(self._store, new_session_id, list(copied), publisher=self._publisher,
                                clock=self._clock, new_id=self._new_id, summary_message=self._summary_message)
        await self._publish("forked", new_session=new_session_id, entries=len(copied))
        return forked

    async def compact(self, summary: str, first_kept_id: str | None = None, *,
                      keep_turns: int | None = None) -> Entry:
        """Append a compaction at the leaf: the model will read ``summary``, then the
        path from ``first_kept_id`` on (or from the ``keep_turns``-th last user message).
        Removes nothing; branching to an entry before it reads the uncompacted path.
        Publishes ``compacted``.

        :raises ValueError: neither or both of ``first_kept_id`` and ``keep_turns``,
            or the entry is not on the active path.
        """
        if (first_kept_id is None) == (keep_turns is None):
            raise ValueError("give first_kept_id or keep_turns, not both or neither")
        line = path(self._log, self._leaf) if self._leaf is not None else []
        if keep_turns is not None:
            users = [e for e in line if e.kind == "message" and isinstance(e.payload, Message)
                     and e.payload.role == "user"]
            if keep_turns < 1 or not users:
                raise ValueError(f"keep_turns must be >= 1 and the path must have a user message; "
                                 f"got {keep_turns} with {len(users)} user messages")
            first_kept_id = users[max(0, len(users) - keep_turns)].id
        assert first_kept_id is not None
        if first_kept_id not in {e.id for e in line}:
            raise ValueError(f"session {self._id!r}: {first_kept_id!r} is not on the active path")
        entry = Entry.compaction(self._new_id(), self._leaf, self._clock(), summary, first_kept_id)
        await _call(self._store.append(self._id, [entry]))
        self._log.append(entry)
        self._leaf = entry.id
        await self._publish("compacted", entry=entry.id, first_kept_id=first_kept_id)
        return entry

    # -- plumbing ---------------------------------------------------------------------

    def _batch(self, items: Sequence[Any], parent: str | None) -> list[Entry]:
        batch: list[Entry] = []
        for item in items:
            when, entry_id = self._clock(), self._new_id()
            if isinstance(item, Message):
                entry = Entry.message(entry_id, parent, when, item)
            elif isinstance(item, Meta):
                entry = Entry.meta(entry_id, parent, when, item.message)
            elif isinstance(item, Custom):
                entry = Entry(entry_id, parent, when, "custom", item)
            elif isinstance(item, Ephemeral):
                raise TypeError("ephemeral content is never stored: pass it to run(), which hands it "
                                "to the model only")
            else:
                raise TypeError(f"cannot store {type(item).__name__}: give a Message, Meta or Custom")
            batch.append(entry)
            parent = entry.id
        return batch

    async def _write_items(self, items: Iterable[Any]) -> list[Entry]:
        items = list(items)
        batch = self._batch(items, self._leaf)
        if not batch:
            return []
        created = False
        if not self._log:
            created = bool(await _call(self._store.create(self._id, batch)))
            if not created:
                # Another handle created the session first: attach to its leaf instead.
                self._log = list(await _call(self._store.entries(self._id)))
                self._leaf = _resume_leaf(self._log)
                batch = self._batch(items, self._leaf)
        if not created:
            await _call(self._store.append(self._id, batch))
        self._log += batch
        self._leaf = batch[-1].id
        if created:
            await self._publish("session_init", created=True, entries=len(batch))
        return batch

    async def _publish(self, kind: EventKind, **detail: Any) -> None:
        if self._publisher is not None:
            await _call(self._publisher(Event(kind, self._id, self._leaf, detail)))


def _resume_leaf(log: Sequence[Entry]) -> str | None:
    last = leaf_id(log)
    if last is None:
        return None
    entry = log[-1]
    if isinstance(entry.payload, Custom) and entry.payload.kind == BRANCH_KIND:
        return entry.parent_id
    return last
