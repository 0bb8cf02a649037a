"""The contract every session store keeps: the message model, the ``Store`` protocol,
a session handle, and the argument checks a store runs before touching its backend.

Errors. A store raises ``TypeError``/``ValueError`` for bad arguments before touching
its backend, and :class:`StoreError` when the backend fails. A ``StoreError`` changed
nothing: the transaction was rolled back (or never began), and the message names the
operation, the session and the cause. The one exception is :class:`OutcomeUnknown`
(a ``StoreError``): the connection was lost after the commit was sent, so nobody can
say whether it landed. Per method:

- ``save``: the transcript is the old one or the new one (never a mix); saving again
  is safe.
- ``add_steer``: the steer may or may not be queued. Retrying may queue it twice:
  under this error delivery is at least once, and it is the only way a steer can be
  duplicated.
- ``take_steers``: the error carries the steers the take read (``.steers``, oldest
  first): they were taken if the commit landed and are still queued if it did not.
  Acting on them and taking again may see them a second time.

A commit known to have landed is a success, whatever happens to the connection
afterwards (a failing release back to a pool is logged, not raised).

Standard library only: a store package can depend on this module without pulling in
pytest, Hypothesis or any database driver.
"""

from __future__ import annotations

import inspect
import itertools
from binascii import a2b_base64 as _a2b_base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, runtime_checkable

__all__ = [
    "MAX_ID_BYTES",
    "MAX_NAME_BYTES",
    "MAX_SESSION_ID_BYTES",
    "ROLES",
    "Attachment",
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
    "open_session",
]

Role = Literal["system", "user", "assistant", "tool"]
ROLES: Final = frozenset({"system", "user", "assistant", "tool"})

#: The longest session id (in UTF-8 bytes) every store must hold exactly. Longer ids
#: are refused with ``ValueError`` rather than silently truncated by a key column.
MAX_SESSION_ID_BYTES: Final = 512

#: The longest id inside a value (``ToolCall.id``, ``ToolResult.call_id``, and an entry's
#: id, parent id and kept id in :mod:`storetest.entries`), in UTF-8 bytes. Every store
#: must hold ids this long exactly (an indexed column must fit them: a Postgres btree
#: row holds about 2.7 KB); the value types refuse longer ones with ``ValueError``.
MAX_ID_BYTES: Final = 512

#: The longest short name (``ToolCall.name``, ``Attachment.media_type`` and an entry's
#: ``Custom.kind``), in UTF-8 bytes, held exactly; longer ones are refused the same way.
MAX_NAME_BYTES: Final = 256


def _check_str(owner: str, field: str, value: object, limit: int | None = None) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{owner}.{field} must be str, not {type(value).__name__}")
    _check_encodable(f"{owner}.{field}", value)
    if limit is not None:
        _check_size(f"{owner}.{field}", value, limit)


def _check_size(what: str, value: str, limit: int) -> None:
    """Refuse ``value`` (named ``what``) when it is longer than ``limit`` bytes of UTF-8."""
    # Most ids are ASCII: a length check settles them without encoding.
    if len(value) * 4 > limit and (size := len(value.encode("utf-8"))) > limit:
        raise ValueError(f"{what} is {size} bytes of UTF-8; the limit is {limit}")


def _check_encodable(what: str, value: str) -> None:
    # A lone surrogate cannot be written as UTF-8, so no database can store it;
    # refusing it here beats a driver error halfway through a save. ASCII text (most of
    # it) holds none: isascii() settles it without encoding a copy.
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} contains a lone surrogate at index {exc.start}; it is not valid Unicode text"
        ) from None


@dataclass(frozen=True, slots=True)
class Text:
    """Plain text written by a person or the model."""

    text: str

    def __post_init__(self) -> None:
        _check_str("Text", "text", self.text)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A model's request to run a tool. ``arguments`` is the raw JSON text the model
    produced: stores keep it byte for byte and never parse it (it may not even be
    valid JSON, as when a reply was cut off)."""

    id: str
    name: str
    arguments: str

    def __post_init__(self) -> None:
        _check_str("ToolCall", "id", self.id, MAX_ID_BYTES)
        _check_str("ToolCall", "name", self.name, MAX_NAME_BYTES)
        _check_str("ToolCall", "arguments", self.arguments)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned, referring to the ``ToolCall.id`` it answers."""

    call_id: str
    content: str
    is_error: bool = False

    def __post_init__(self) -> None:
        _check_str("ToolResult", "call_id", self.call_id, MAX_ID_BYTES)
        _check_str("ToolResult", "content", self.content)
        if not isinstance(self.is_error, bool):
            raise TypeError(f"ToolResult.is_error must be bool, not {type(self.is_error).__name__}")


@dataclass(frozen=True, slots=True)
class Attachment:
    """Binary data (an image, a file) with its media type; the bytes are kept exactly."""

    media_type: str
    data: bytes

    def __post_init__(self) -> None:
        _check_str("Attachment", "media_type", self.media_type, MAX_NAME_BYTES)
        # The slot itself: self.data would decode base64 text (see _AttachmentData).
        data = _ATTACHMENT_DATA_SLOT.__get__(self)
        if type(data) is not bytes:
            raise TypeError(f"Attachment.data must be bytes, not {type(data).__name__}")


class _AttachmentData:
    """``Attachment.data``: the ``data`` slot, read through this descriptor so that a
    store's trusted reader may leave the base64 text it stored in the slot (a ``str``)
    and the bytes are decoded on first access, then kept in the slot.

    Only :func:`storetest.codec.decode_trusted` and
    :func:`~storetest.codec.decode_trusted_json` put a ``str`` there (through
    :data:`_ATTACHMENT_DATA_SLOT`, the slot itself); a checked ``Attachment`` refuses
    anything but ``bytes``. Everything that reads ``data``, equality, hashing, ``repr``,
    pickling and copying (the dataclass's ``__getstate__``), ``dataclasses.asdict`` and
    ``replace``, reads it through here, so it sees the bytes, never the text.
    """

    __slots__ = ("_delete", "_get", "_set")

    def __init__(self, slot: Any) -> None:
        self._get = slot.__get__
        self._set = slot.__set__
        self._delete = slot.__delete__

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = self._get(obj)
        if type(value) is str:
            # Two threads decoding at once store equal bytes; either is the value. Strict:
            # a character outside base64's alphabet raises rather than being skipped.
            value = _a2b_base64(value, strict_mode=True)
            self._set(obj, value)
        return value

    def __set__(self, obj: object, value: object) -> None:
        self._set(obj, value)

    def __delete__(self, obj: object) -> None:
        self._delete(obj)


#: The ``data`` slot behind ``Attachment.data``, for the trusted decoders to write
#: base64 text into (private to :mod:`storetest.codec`).
_ATTACHMENT_DATA_SLOT: Final = Attachment.__dict__["data"]
setattr(Attachment, "data", _AttachmentData(_ATTACHMENT_DATA_SLOT))  # noqa: B010 (a field, to mypy)


Content = Text | ToolCall | ToolResult | Attachment
_CONTENT_TYPES: Final = (Text, ToolCall, ToolResult, Attachment)


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of a transcript: a role and its ordered content.

    ``content`` may be given as any sequence; it is stored as a tuple so a message,
    once made, cannot change under a store that keeps a reference to it.
    """

    role: Role
    content: tuple[Content, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.role, str):
            raise TypeError(f"Message.role must be str, not {type(self.role).__name__}")
        if self.role not in ROLES:
            raise ValueError(f"Message.role must be one of {sorted(ROLES)}, not {self.role!r}")
        content = self.content
        if isinstance(content, (str, bytes)) or not isinstance(content, Sequence):
            raise TypeError(
                f"Message.content must be a sequence of Text, ToolCall, ToolResult or "
                f"Attachment, not {type(content).__name__}"
            )
        for i, part in enumerate(content):
            if not isinstance(part, _CONTENT_TYPES):
                raise TypeError(
                    f"Message.content[{i}] must be Text, ToolCall, ToolResult or Attachment, "
                    f"not {type(part).__name__}"
                )
        if type(content) is not tuple:
            object.__setattr__(self, "content", tuple(content))

    @classmethod
    def text(cls, role: Role, text: str) -> Message:
        """A message holding one piece of text: ``Message.text("user", "hi")``."""
        return cls(role, (Text(text),))


def check_session_id(session: object) -> str:
    """Return ``session`` if it is a usable session id, else raise.

    Session ids are exact strings: stores compare them byte for byte, with no case,
    accent, Unicode-normalization or trailing-space folding.

    :raises TypeError: ``session`` is not a ``str``.
    :raises ValueError: it is empty, not valid Unicode, or longer than
        :data:`MAX_SESSION_ID_BYTES` bytes of UTF-8.
    """
    if type(session) is str and session.isascii() and 0 < len(session) <= MAX_SESSION_ID_BYTES:
        # The common id, settled in one line: every call of every store starts here,
        # and the helpers below cost 2.2-3.4 us more run cold (benchmarks/cold_calls.py).
        return session
    if not isinstance(session, str):
        raise TypeError(f"session must be str, not {type(session).__name__}")
    if not session:
        raise ValueError("session must not be empty")
    _check_encodable("session", session)
    _check_size("session", session, MAX_SESSION_ID_BYTES)
    return session


def check_messages(messages: object) -> tuple[Message, ...]:
    """Return ``messages`` as a tuple if every item is a :class:`Message`, else raise.

    Call it before writing anything, so a bad item leaves the stored transcript as it was.
    A ``Message`` is checked when it is made (its fields' types, valid Unicode, and the
    :data:`MAX_ID_BYTES` / :data:`MAX_NAME_BYTES` limits), so every item that passes
    here keeps the contract's limits.

    :raises TypeError: ``messages`` is not a sequence of ``Message``.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a sequence of Message, not {type(messages).__name__}")
    items = tuple(messages)
    # The fast path matters: agents save the whole transcript before every request.
    if not all(map(isinstance, items, itertools.repeat(Message))):
        for i, message in enumerate(items):
            if not isinstance(message, Message):
                raise TypeError(f"messages[{i}] must be Message, not {type(message).__name__}")
    return items


def check_steer_text(text: object) -> str:
    """Return ``text`` if it can be queued as a steer, else raise.

    :raises TypeError: ``text`` is not a ``str``.
    :raises ValueError: it is not valid Unicode (a lone surrogate).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    _check_encodable("text", text)
    return text


class StoreError(RuntimeError):
    """A backend failed (a closed pool, a lost connection, a value the database refused).

    Stores raise it ``from`` the driver's exception, with a message that names the
    operation, the session and the cause, and only after making sure nothing was
    changed; the subclass :class:`OutcomeUnknown` is the one case where that cannot be
    known.
    """


class OutcomeUnknown(StoreError):
    """The connection was lost after the commit was sent: the operation may or may not
    have taken effect.

    A ``save`` left the old transcript or the new one (saving again is safe); an
    ``add_steer`` may have queued its steer (a retry may queue it twice); a
    ``take_steers`` carries in :attr:`steers` what it read, oldest first, which were
    taken if the commit landed and are still queued if not.

    :param message: names the operation, the session and the cause, like any
        ``StoreError``.
    :param steers: for ``take_steers``, the steers the take read; else empty.
    """

    def __init__(self, message: str, *, steers: Sequence[str] = ()) -> None:
        super().__init__(message)
        #: The steers a ``take_steers`` read before its commit's outcome was lost.
        self.steers: list[str] = list(steers)


@runtime_checkable
class Store(Protocol):
    """A backend holding many sessions' transcripts and steer queues.

    Every method checks its arguments (``check_session_id`` and friends) and raises
    ``TypeError``/``ValueError`` before touching the backend.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        """Make the session's transcript exactly ``messages`` (replace, never append),
        atomically: a reader sees the old transcript or the new one, never a mix."""

    async def messages(self, session: str) -> list[Message]:
        """The transcript in the order saved; ``[]`` for a session never used. The
        list is the caller's: changing it changes nothing stored."""

    async def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session."""

    async def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none. Each
        steer is returned by exactly one call, across every handle on the backend."""


class SyncStore(Protocol):
    """The same contract as :class:`Store` with plain methods; the suite drives it
    from threads where ``Store`` is driven from tasks."""

    def save(self, session: str, messages: Sequence[Message]) -> None: ...
    def messages(self, session: str) -> list[Message]: ...
    def add_steer(self, session: str, text: str) -> None: ...
    def take_steers(self, session: str) -> list[str]: ...


class Session:
    """One conversation, already addressed, so nothing has to thread its id around.

    Made by :func:`open_session`. Its methods are coroutines whatever the store's are.
    """

    __slots__ = ("_id", "_store")

    def __init__(self, session_id: str, store: Store | SyncStore) -> None:
        self._id = check_session_id(session_id)
        self._store = store

    @property
    def id(self) -> str:
        return self._id

    def __repr__(self) -> str:
        return f"Session({self._id!r}, {self._store!r})"

    async def save(self, messages: Sequence[Message]) -> None:
        await _maybe_await(self._store.save(self._id, messages))

    async def messages(self) -> list[Message]:
        result: list[Message] = await _maybe_await(self._store.messages(self._id))
        return result

    async def steer(self, text: str) -> None:
        await _maybe_await(self._store.add_steer(self._id, text))

    async def take_steers(self) -> list[str]:
        result: list[str] = await _maybe_await(self._store.take_steers(self._id))
        return result


async def _maybe_await(value: Any) -> Any:
    # One Session serves async and sync stores alike.
    if inspect.isawaitable(value):
        return await value
    return value


def open_session(session_id: str, store: Store | SyncStore) -> Session:
    """Bind ``store`` to one conversation.

    :raises TypeError, ValueError: ``session_id`` is not a usable id (see
        :func:`check_session_id`).
    """
    return Session(session_id, store)
