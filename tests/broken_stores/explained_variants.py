"""Broken stores whose damage only an explanation names: each does one known thing to
what it keeps (a charset, an escape, a JSON layer, a merge, an order, a stale version),
and the first line of its failure must name that thing, not a symptom ("text changed",
"36 lost", "the rest cut off"). They are the bugs measured from outside that earlier
diagnoses described vaguely or wrongly; the engine behind their lines is
:mod:`storetest._engine.explain` and the sequence checks of
:func:`storetest._engine.diagnosis.describe_transcript`.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from reference_stores.memory import MemoryStore
from storetest import chat_histories, item_sessions
from storetest.contract import (
    Content,
    Message,
    Text,
    ToolCall,
    ToolResult,
    check_messages,
    check_session_id,
    check_steer_text,
)
from tests.broken_stores import BrokenStore
from tests.broken_stores.chat_variants import MemoryChatHistory
from tests.broken_stores.chat_variants import _opener as _chat_opener
from tests.item_histories import MemorySession, backend_for


class _TextLayerStore(MemoryStore):
    """Saves every text field (message text, tool results) through ``layer``."""

    @staticmethod
    def layer(text: str) -> str:
        return text

    def _part(self, part: Content) -> Content:
        if isinstance(part, Text):
            return Text(self.layer(part.text))
        if isinstance(part, ToolResult):
            return replace(part, content=self.layer(part.content))
        return part

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        self.backend.transcripts[session] = tuple(
            replace(m, content=tuple(self._part(p) for p in m.content)) for m in check_messages(messages))


class Cp1252Store(_TextLayerStore):
    """Text written through a latin1 connection and read back as Windows-1252: the C1
    controls (U+0080-U+009F) come back as the characters cp1252 puts at those bytes.

    In the wild: MySQL's ``latin1`` is cp1252, so a latin1 column read by a client that
    decodes strictly as latin-1 (or the reverse) swaps these characters.
    """

    #: Each C1 control as the cp1252 character at its byte (a table: the clauses save MiB texts).
    C1: ClassVar[dict[int, str]] = {c: bytes([c]).decode("cp1252", "replace") for c in range(0x80, 0xA0)}

    @classmethod
    def layer(cls, text: str) -> str:
        return text.translate(cls.C1) if re.search("[\x80-\x9f]", text) else text


class PercentDecodingStore(_TextLayerStore):
    """Text URL-decoded on the way in: ``%41`` comes back ``A``.

    In the wild: a store behind an HTTP API that form-encodes the body and a server that
    decodes it twice.
    """

    @staticmethod
    def layer(text: str) -> str:
        return urllib.parse.unquote(text)


class HtmlEscapingStore(_TextLayerStore):
    """Text HTML-escaped on the way in (``&`` becomes ``&amp;``, quotes escaped).

    In the wild: a sanitizer or template filter applied to a value bound for a page,
    left on the path to the database.
    """

    @staticmethod
    def layer(text: str) -> str:
        return html.escape(text)


class _ArgumentsLayerStore(MemoryStore):
    @staticmethod
    def layer(arguments: str) -> str:
        return arguments

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        self.backend.transcripts[session] = tuple(
            replace(m, content=tuple(replace(p, arguments=self.layer(p.arguments)) if isinstance(p, ToolCall) else p
                                     for p in m.content))
            for m in check_messages(messages))


class EmptyArgumentsAsObjectStore(_ArgumentsLayerStore):
    """Empty tool-call arguments stored as ``'{}'``.

    In the wild: a JSON column with ``DEFAULT '{}'`` and an ORM that writes ``None`` for
    an empty string; adapters that "fix" arguments a model left empty.
    """

    @staticmethod
    def layer(arguments: str) -> str:
        return arguments or "{}"


class JsonStringUnwrappingStore(_ArgumentsLayerStore):
    """Arguments parsed, and a JSON string kept as its content (``'"just a string"'``
    comes back ``'just a string'``); objects are kept as text.

    In the wild: ``args = json.loads(raw); store(args if isinstance(args, str) else raw)``
    in adapters that accept a provider's arguments as a string or an object.
    """

    @staticmethod
    def layer(arguments: str) -> str:
        try:
            value = json.loads(arguments)
        except ValueError:
            return arguments
        return value if isinstance(value, str) else arguments


class MergesSameRoleStore(MemoryStore):
    """Adjacent messages of the same role merged into one (their content parts joined).

    In the wild: adapters for providers that require alternating roles merge
    consecutive user messages, and the merged transcript is what gets stored.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        merged: list[Message] = []
        for m in check_messages(messages):
            if merged and merged[-1].role == m.role:
                merged[-1] = replace(merged[-1], content=merged[-1].content + m.content)
            else:
                merged.append(m)
        self.backend.transcripts[session] = tuple(merged)


class NewestFirstStore(MemoryStore):
    """The transcript read newest first.

    In the wild: ``ORDER BY id DESC`` copied from a "latest messages" query; Redis
    ``LPUSH`` with ``LRANGE 0 -1``.
    """

    async def messages(self, session: str) -> list[Message]:
        return (await super().messages(session))[::-1]


class DeduplicatingStore(MemoryStore):
    """Identical messages kept once: the transcript stored as a set of unique messages,
    in first-seen order.

    In the wild: a UNIQUE constraint on (session, content hash) with ``ON CONFLICT DO
    NOTHING``; ``dict.fromkeys`` used to drop "accidental" repeats.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        self.backend.transcripts[session] = tuple(dict.fromkeys(check_messages(messages)))


class PreviousSaveStore(MemoryStore):
    """``messages()`` returns the transcript of the save before the last one: a version
    cache that is one save behind.

    In the wild: a read-through cache filled before the write commits, and a handle
    that returns what it last loaded rather than what it last wrote.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._before: dict[str, tuple[Message, ...]] = {}

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        self._before[session] = self.backend.transcripts.get(session, ())
        await super().save(session, messages)

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        if session in self._before:
            return list(self._before[session])
        return await super().messages(session)


def _broken(name: str, cls: type[MemoryStore], bug: str, wild: str, clause: str, diagnosis: str) -> BrokenStore:
    def factory() -> Any:
        return cls()

    factory.__name__ = factory.__qualname__ = "make_" + name.replace("-", "_")
    return BrokenStore(name, bug, wild, clause, diagnosis, factory)


BROKEN: list[BrokenStore] = [
    _broken("memory-cp1252", Cp1252Store, "C1 controls read back as their Windows-1252 characters",
            "MySQL latin1 (= cp1252) read as latin-1, or the reverse",
            "transcript_round_trips_exactly", "C1 controls read back as their Windows-1252 characters"),
    _broken("memory-percent-decoded", PercentDecodingStore, "text URL-decoded on the way in",
            "a form-encoded HTTP API decoded twice", "transcript_round_trips_exactly", "percent escapes decoded"),
    _broken("memory-html-escaped", HtmlEscapingStore, "text HTML-escaped on the way in",
            "a sanitizer or template filter left on the path to the database",
            "transcript_round_trips_exactly", "HTML-escaped"),
    _broken("memory-empty-arguments-as-object", EmptyArgumentsAsObjectStore, "empty arguments stored as '{}'",
            "a JSON column with DEFAULT '{}'; adapters that fix empty arguments",
            "tool_arguments_are_kept_verbatim", "the empty string came back as '{}'"),
    _broken("memory-json-string-unwrapped", JsonStringUnwrappingStore, "a JSON string argument kept as its content",
            "args parsed, kept parsed when a string", "tool_arguments_are_kept_verbatim", "a JSON string unwrapped"),
    _broken("memory-same-role-merged", MergesSameRoleStore, "adjacent messages of the same role merged into one",
            "adapters for providers that require alternating roles", "transcript_round_trips_exactly",
            "adjacent messages of the same role merged into one"),
    _broken("memory-newest-first", NewestFirstStore, "the transcript read newest first",
            "ORDER BY id DESC; LPUSH + LRANGE", "transcript_round_trips_exactly", "newest first"),
    _broken("memory-deduplicated", DeduplicatingStore, "identical messages kept once",
            "a UNIQUE (session, content hash) with ON CONFLICT DO NOTHING", "transcript_round_trips_exactly",
            "identical messages deduplicated"),
    _broken("memory-previous-save", PreviousSaveStore, "messages() returns the save before the last",
            "a read-through cache filled before the write commits", "save_replaces_the_transcript",
            "the save was ignored: the previous transcript is still there"),
]


class SteersNeedATranscriptStore(MemoryStore):
    """Steers kept in the session's row, written with an UPDATE: a session with no
    transcript has no row, the UPDATE touches nothing, and the steer is silently dropped.

    In the wild: a ``steers`` JSON column beside the transcript, appended with
    ``UPDATE sessions SET steers = ... WHERE id = ?`` and no upsert.
    """

    def replica(self) -> MemoryStore:
        return SteersNeedATranscriptStore(self.backend)

    async def add_steer(self, session: str, text: str) -> None:
        if check_session_id(session) in self.backend.transcripts:
            await super().add_steer(session, text)


BROKEN += [
    BrokenStore("memory-steers-need-a-transcript", "a steer for a session with no transcript is dropped",
                "steers in the transcript's row, appended with an UPDATE and no upsert",
                "transcript_and_steers_are_independent", "queued before the session's first save was lost",
                SteersNeedATranscriptStore),
]



class PerHandleNumbersStore(MemoryStore):
    """Each steer stored under a sequence number the handle counts itself, per session,
    with an upsert: two handles adding to one session number their steers alike, and
    the later steer replaces the earlier one with the same number. Takes return the
    steers in number order.

    In the wild: ``seq = next(self._counter)`` (or ``max(seq) + 1`` read once and cached
    in the handle) and ``INSERT ... ON CONFLICT (session, seq) DO UPDATE``, ``HSET
    steers:<id> <seq> <text>``: right with one process, wrong with two.
    """

    def __init__(self, backend: Any = None) -> None:
        super().__init__(backend)
        self._next: dict[str, int] = {}

    def replica(self) -> MemoryStore:
        return PerHandleNumbersStore(self.backend)

    def _numbered(self) -> dict[str, dict[int, str]]:
        # The numbered queues live beside the backend's own data, shared by its handles.
        queues: dict[str, dict[int, str]] = self.backend.__dict__.setdefault("numbered_steers", {})
        return queues

    async def add_steer(self, session: str, text: str) -> None:
        session, text = check_session_id(session), check_steer_text(text)
        n = self._next.get(session, 0)
        self._next[session] = n + 1
        self._numbered().setdefault(session, {})[n] = text

    async def take_steers(self, session: str) -> list[str]:
        queue = self._numbered().pop(check_session_id(session), {})
        return [queue[n] for n in sorted(queue)]


def _per_handle_numbers() -> PerHandleNumbersStore:
    return PerHandleNumbersStore()


def _per_handle_numbers_replica(primary: PerHandleNumbersStore) -> MemoryStore:
    return primary.replica()


BROKEN += [
    BrokenStore("memory-steers-numbered-per-handle", "each handle numbers its steers itself; the same number "
                "replaces", "a sequence counter in the process, or max(seq)+1 cached, with an upsert on (session, "
                "seq)", "steers_are_taken_once_across_replicas", "two handles numbered their steers alike",
                _per_handle_numbers, replica=_per_handle_numbers_replica),
]


# --- item and chat histories: reshapes and kinds, each named by its first line -----------


class NewestFirstItems(MemorySession):
    """``get_items()`` returns the history newest first.

    In the wild: ``ORDER BY id DESC`` kept from the query that serves ``pop_item``; a
    Redis list written with ``LPUSH`` and read with ``LRANGE 0 -1``.
    """

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return (await super().get_items(limit))[::-1]


class DeduplicatingItems(MemorySession):
    """An item identical to one already in the history is not added again.

    In the wild: a UNIQUE constraint on (session, item hash) with ``ON CONFLICT DO
    NOTHING``, meant to make retried writes idempotent.
    """

    async def add_items(self, items: list[Any]) -> None:
        seen = {json.dumps(i, sort_keys=True) for i in self.items}
        fresh = []
        for item in items:
            if json.dumps(item, sort_keys=True) not in seen:
                seen.add(json.dumps(item, sort_keys=True))
                fresh.append(item)
        await super().add_items(fresh)


class OneListForEverySession(MemorySession):
    """Every session's items in one list: ``items`` a class attribute, so every instance,
    whatever its ``session_id``, appends to and reads the same list.

    In the wild: ``class MySession: items = []`` (a mutable class attribute where
    ``self.items = []`` in ``__init__`` was meant).
    """

    shared: ClassVar[dict[int, list[Any]]] = {}

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self.items = self.shared.setdefault(id(backend), [])


def _item_opener(cls: type[MemorySession]) -> Any:
    async def outer(tmp_path: Path) -> Any:
        backend = backend_for(tmp_path)
        if cls is OneListForEverySession:
            OneListForEverySession.shared.pop(id(backend), None)  # a new backend, a new list
        return lambda session_id: cls(backend, session_id)

    outer.__name__ = outer.__qualname__ = f"{cls.__name__}_sessions"
    return outer


class ToolMessagesAsAI(MemoryChatHistory):
    """A ``ToolMessage`` stored as an ``AIMessage`` with its content: the history keeps
    a role column with two values, human and ai, and maps everything else to ai.

    In the wild: a table with ``is_user BOOLEAN`` or a ``role IN ('human', 'ai')``
    check, and a converter that writes any non-human message as ai.
    """

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        super().add_messages([AIMessage(content=m.content, id=m.id) if isinstance(m, ToolMessage) else m
                              for m in messages])


class NewestFirstChat(MemoryChatHistory):
    """``messages`` newest first (``LPUSH`` and ``LRANGE 0 -1``)."""

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return super().messages[::-1]


BROKEN += [
    BrokenStore("items-newest-first", "get_items() returns the history newest first",
                "ORDER BY id DESC; LPUSH + LRANGE 0 -1", "items_round_trip_exactly",
                "items came back newest first", item_sessions(_item_opener(NewestFirstItems))),
    BrokenStore("items-deduplicated", "an item identical to one in the history is not added again",
                "UNIQUE (session, item hash) with ON CONFLICT DO NOTHING", "items_keep_their_order",
                "identical items deduplicated", item_sessions(_item_opener(DeduplicatingItems))),
    BrokenStore("items-one-list-for-every-session", "every session's items in one class-level list",
                "a mutable class attribute (items = []) where an instance attribute was meant",
                "item_sessions_are_isolated", "every session holds the items of every other",
                item_sessions(_item_opener(OneListForEverySession))),
    BrokenStore("chat-tool-messages-as-ai", "a ToolMessage stored as an AIMessage",
                "a role column that holds human or ai, everything else written as ai", "items_round_trip_exactly",
                "a ToolMessage came back as an AIMessage", chat_histories(_chat_opener(ToolMessagesAsAI))),
    BrokenStore("chat-newest-first", "messages newest first", "LPUSH + LRANGE 0 -1", "items_round_trip_exactly",
                "items came back newest first", chat_histories(_chat_opener(NewestFirstChat))),
]


class LimitPlusOne(MemorySession):
    """``get_items(limit)`` returns one item more than asked: ``items[-limit - 1:]``.

    In the wild: an off-by-one in a slice or ``LIMIT :n + 1`` kept from a pager that
    fetches one more row to know whether there is a next page, and does not drop it.
    """

    async def get_items(self, limit: int | None = None) -> list[Any]:
        items = await super().get_items()
        return items if limit is None else items[-limit - 1:] if limit else []


BROKEN += [
    BrokenStore("items-limit-plus-one", "get_items(limit) returns limit + 1 items",
                "a pager's LIMIT n + 1 kept; an off-by-one slice", "get_items_gives_the_latest",
                "more than the limit", item_sessions(_item_opener(LimitPlusOne))),
]
