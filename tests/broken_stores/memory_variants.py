"""Broken variants of the in-memory reference store (:mod:`reference_stores.memory`).

Each class changes one method of :class:`MemoryStore` (or one line in it) to carry one
bug; the module-level functions are the factories (``storetest check
tests.broken_stores.memory_variants:jsonb_arguments_store`` runs the whole suite on one).
An ``await asyncio.sleep(0)`` stands for the network round trip between two commands
to a server such as Redis: it is where another task's command lands, exactly as on a
real server.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import json
import re
import threading
import time
import unicodedata
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from reference_stores.memory import MemoryBackend, MemoryStore
from storetest.contract import (
    Attachment,
    Content,
    Message,
    StoreError,
    Text,
    ToolCall,
    ToolResult,
    check_messages,
    check_session_id,
    check_steer_text,
)
from tests.broken_stores import BrokenStore

# --- content rewritten on the way in ---------------------------------------------------


class _RewritingStore(MemoryStore):
    """Saves each content part through ``rewrite`` (the broken layer under test)."""

    @staticmethod
    def rewrite(part: Content) -> Content:
        return part

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        checked = check_messages(messages)
        self.backend.transcripts[session] = tuple(
            replace(m, content=tuple(self.rewrite(p) for p in m.content)) for m in checked
        )


def _jsonb_like(arguments: str) -> str:
    """What Postgres ``jsonb`` does to JSON text: last duplicate key wins, keys sorted
    shorter-first then bytewise, whitespace normalized to ``", "`` and ``": "``."""

    def obj(pairs: list[tuple[str, object]]) -> dict[str, object]:
        merged = dict(pairs)
        return {k: merged[k] for k in sorted(merged, key=lambda k: (len(k.encode()), k.encode()))}

    try:
        value = json.loads(arguments, object_pairs_hook=obj)
    except ValueError:
        return arguments  # not JSON: kept as a string, like LangChain's invalid_tool_calls
    return json.dumps(value, ensure_ascii=False)


class JsonbArgumentsStore(_RewritingStore):
    """Tool-call arguments parsed and re-serialized as a ``jsonb`` column would.

    In the wild: the seed Go SDK's Postgres store (arguments as ``json.RawMessage`` in
    ``jsonb``), and every Python store that keeps ``tool_calls[].args`` as a parsed
    dict (LangChain's ``AIMessage.tool_calls``) and dumps it again on the way out.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, ToolCall):
            return replace(part, arguments=_jsonb_like(part.arguments))
        return part


def _text_rewriter(fn: Callable[[str], str], doc: str) -> type[_RewritingStore]:
    class Store(_RewritingStore):
        @staticmethod
        def rewrite(part: Content) -> Content:
            return replace(part, text=fn(part.text)) if isinstance(part, Text) else part

    Store.__doc__ = doc
    return Store


NfcStore = _text_rewriter(
    lambda s: unicodedata.normalize("NFC", s),
    """Message text normalized to NFC before it is stored.

    In the wild: "clean up" input layers (``unicodedata.normalize`` in a sanitizer),
    macOS file names (HFS+ stores NFD), search-oriented ingestion pipelines.""",
)
RstripStore = _text_rewriter(
    str.rstrip,
    """Trailing whitespace stripped from message text.

    In the wild: form and template layers that ``.strip()`` every field, CHAR columns
    (padded, then trimmed on read), YAML/Markdown round trips.""",
)
CrlfStore = _text_rewriter(
    lambda s: s.replace("\r\n", "\n"),
    """``\\r\\n`` turned into ``\\n`` in message text.

    In the wild: files opened in text mode (``newline=None``), git ``autocrlf``, HTTP
    form encoders and editors that normalize line endings.""",
)
NulStrippingStore = _text_rewriter(
    lambda s: s.replace("\x00", ""),
    """NUL characters dropped from message text.

    In the wild: the usual workaround for Postgres refusing NUL in ``text``/``jsonb``
    (``.replace("\\x00", "")`` before insert), and C-string layers.""",
)

#: A MySQL ``TEXT`` column: 65,535 bytes.
TEXT_LIMIT = 65_535


class TruncatingStore(_RewritingStore):
    """Message text cut to 65,535 UTF-8 bytes (on a character boundary).

    In the wild: a MySQL/MariaDB ``TEXT`` column on a server outside strict mode
    (truncates with only a warning), ``VARCHAR(n)`` limits, a DynamoDB or Firestore
    store clipping values to fit an item limit.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, Text):
            cut = part.text.encode("utf-8")[:TEXT_LIMIT].decode("utf-8", "ignore")
            return replace(part, text=cut)
        return part


class AttachmentAsTextStore(_RewritingStore):
    """Attachment bytes decoded as UTF-8 (invalid bytes replaced) and encoded again.

    In the wild: binary payloads put into a ``TEXT``/``str`` field, ``bytes.decode(errors=
    "replace")`` to make JSON happy, drivers returning ``str`` for a text-typed blob.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, Attachment):
            return replace(part, data=part.data.decode("utf-8", "replace").encode("utf-8"))
        return part


# --- saves -----------------------------------------------------------------------------


class AppendingStore(MemoryStore):
    """``save`` appends the messages to the stored transcript instead of replacing it.

    In the wild: an ``INSERT``-only save (no ``DELETE`` first), ``RPUSH`` without ``DEL``,
    ``$push`` instead of ``$set`` in MongoDB; it looks right while each caller saves
    only its new messages.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        old = self.backend.transcripts.get(session, ())
        self.backend.transcripts[session] = old + check_messages(messages)


class IgnoresEmptyStore(MemoryStore):
    """``save(session, [])`` does nothing, so the old transcript stays.

    In the wild: ``if not messages: return`` as an optimization, and bulk-insert helpers
    (``executemany``, ``insert_many``) that skip or refuse an empty batch before the
    delete runs.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        if not messages:
            return
        await super().save(session, messages)


class TornSaveStore(MemoryStore):
    """``save`` deletes the transcript, then pushes the messages one command at a time,
    with no transaction around them: concurrent saves interleave.

    In the wild: Redis ``DEL`` then ``RPUSH`` without ``MULTI``/``EXEC`` (or a pipeline
    that is not transactional), SQL ``DELETE`` then ``INSERT``s in autocommit mode.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        new = check_messages(messages)
        self.backend.transcripts[session] = ()  # DEL
        for message in new:
            await asyncio.sleep(0)  # the round trip before the next RPUSH
            self.backend.transcripts[session] = (*self.backend.transcripts.get(session, ()), message)


# --- steers ----------------------------------------------------------------------------


class DedupSteersStore(MemoryStore):
    """Steers kept in a set (insertion-ordered, so only the deduplication shows).

    In the wild: a Redis ``SADD``/``ZADD`` queue (members are unique), a ``UNIQUE
    (session, text)`` constraint with ``ON CONFLICT DO NOTHING``.
    """

    async def take_steers(self, session: str) -> list[str]:
        return list(dict.fromkeys(await super().take_steers(session)))


class LifoSteersStore(MemoryStore):
    """Steers taken newest first.

    In the wild: ``LPUSH`` + ``LRANGE`` in Redis (the list grows at the head),
    ``ORDER BY id DESC`` copied from a "latest messages" query, a Python list used as
    a stack.
    """

    async def take_steers(self, session: str) -> list[str]:
        return (await super().take_steers(session))[::-1]


class TakeFirstThousandStore(MemoryStore):
    """``take_steers`` reads the first 1,000 steers and deletes the whole queue: a
    queue longer than the page loses the rest.

    In the wild: Redis ``MULTI; LRANGE key 0 999; DEL key; EXEC``; ``SELECT ... LIMIT
    1000`` followed by ``DELETE ... WHERE session = ?``.
    """

    async def take_steers(self, session: str) -> list[str]:
        return (await super().take_steers(session))[:1000]


class PeekingTakeStore(MemoryStore):
    """``take_steers`` returns the queued steers but never deletes them.

    In the wild: a take written as a plain ``SELECT`` with the ``DELETE`` forgotten (or
    in a transaction that is never committed), ``LRANGE`` without ``LTRIM``.
    """

    async def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        return list(self.backend.steers.get(session, []))


class UnlockedTakeStore(MemoryStore):
    """``take_steers`` reads the queue, then trims what it read in a second command,
    with no lock or transaction: two takers both read the same steers.

    In the wild: Redis ``LRANGE`` then ``LTRIM`` without ``MULTI``/``WATCH`` or a Lua
    script; any "read, then delete what I read" over an async client.
    """

    async def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        queued = list(self.backend.steers.get(session, []))  # LRANGE 0 -1
        await asyncio.sleep(0)  # the round trip before the LTRIM
        del self.backend.steers.get(session, [])[: len(queued)]  # LTRIM len -1
        return queued


class PerHandleLockStore(MemoryStore):
    """``take_steers`` is read-then-trim guarded by an ``asyncio.Lock`` that belongs to
    the handle: right within one process, a double hand-out across replicas.

    In the wild: a ``threading.Lock``/``asyncio.Lock`` (or a Go ``sync.Mutex``) used to
    make a take atomic, which holds only inside the process that owns it.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self._lock = asyncio.Lock()

    def replica(self) -> PerHandleLockStore:
        return PerHandleLockStore(self.backend)

    async def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        async with self._lock:
            queued = list(self.backend.steers.get(session, []))
            await asyncio.sleep(0)
            del self.backend.steers.get(session, [])[: len(queued)]
            return queued


# --- aliasing and caches ---------------------------------------------------------------


class OwnListStore(MemoryStore):
    """``messages()`` returns the list the store keeps, so a caller that edits the
    result edits the stored transcript.

    In the wild: every in-memory store or cache that ``return self._data[key]``; the
    Go equivalent returns its own slice.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.lists: dict[str, list[Message]] = {}

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        self.lists[session] = list(check_messages(messages))

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        return self.lists.setdefault(session, [])


class KeepsCallersListStore(MemoryStore):
    """``save`` keeps the very list it was given, so the caller appending to its list
    afterwards changes the stored transcript.

    In the wild: ``self._data[key] = messages`` in an in-memory store or test double.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.lists: dict[str, list[Message]] = {}

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        check_messages(messages)
        self.lists[session] = messages  # type: ignore[assignment]

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        return list(self.lists.get(session, []))


class StaleCacheStore(MemoryStore):
    """Each handle serves reads from what it saved itself, so it never sees a save
    made through another replica.

    In the wild: a per-process read-through cache (``functools.lru_cache``, a dict in
    front of the database) with no invalidation across replicas.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.cache: dict[str, list[Message]] = {}

    def replica(self) -> StaleCacheStore:
        return StaleCacheStore(self.backend)

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        await super().save(session, messages)
        self.cache[session] = list(messages)

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        if session in self.cache:
            return list(self.cache[session])
        return await super().messages(session)


# --- session keys ----------------------------------------------------------------------


class _KeyedStore(MemoryStore):
    """Every method looks the session up under ``key(session)``."""

    @staticmethod
    def key(session: str) -> str:
        return session

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        await super().save(self.key(check_session_id(session)), messages)

    async def messages(self, session: str) -> list[Message]:
        return await super().messages(self.key(check_session_id(session)))

    async def add_steer(self, session: str, text: str) -> None:
        await super().add_steer(self.key(check_session_id(session)), text)

    async def take_steers(self, session: str) -> list[str]:
        return await super().take_steers(self.key(check_session_id(session)))


class LowercasedIdStore(_KeyedStore):
    """Sessions keyed by the id lower-cased, so 'A' and 'a' share a conversation.

    In the wild: ids "normalized" with ``.lower()`` on the way in (user names, emails),
    or a case-insensitive key lookup (``ILIKE``, a case-folding dict).
    """

    @staticmethod
    def key(session: str) -> str:
        return session.lower()


class TruncatedIdStore(_KeyedStore):
    """Sessions keyed by the id cut to 64 characters.

    In the wild: a ``VARCHAR(64)`` key column outside MySQL strict mode (silently
    truncated), ``id[:64]`` to fit a Redis key budget or a file name.
    """

    @staticmethod
    def key(session: str) -> str:
        return session[:64]


class HashPrefixIdStore(_KeyedStore):
    """Sessions keyed by the first hex digit of their SHA-1: sixteen shard files, and
    the session id itself forgotten inside the shard.

    In the wild: sharding by a hash prefix (``objects/ab/`` fan-out, a hash-slot or
    partition key) without storing the full id in the shard; any short hash used as
    the whole key. (A 4-hex-digit prefix fails the same way but needs ~300 live ids
    before two collide: see docs/broken-stores.md.)
    """

    @staticmethod
    def key(session: str) -> str:
        return hashlib.sha1(session.encode("utf-8")).hexdigest()[:1]



# --- shapes the verdict issue found slipping through ------------------------------------


def _lock(backend: MemoryBackend) -> threading.Lock:
    """One lock per backend, shared by its replicas (a plain store's mutex)."""
    lock: threading.Lock | None = getattr(backend, "_plain_lock", None)
    if lock is None:
        lock = threading.Lock()
        backend._plain_lock = lock  # type: ignore[attr-defined]
    return lock


class PlainMemoryStore:
    """A correct plain-method (threaded) memory store: every method holds the backend's
    lock from start to end. The base of the plain variants below."""

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        self.backend = backend if backend is not None else MemoryBackend()
        self.lock = _lock(self.backend)

    def replica(self) -> PlainMemoryStore:
        return type(self)(self.backend)

    def save(self, session: str, messages: Sequence[Message]) -> None:
        session, checked = check_session_id(session), check_messages(messages)
        with self.lock:
            self.backend.transcripts[session] = checked

    def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        with self.lock:
            return list(self.backend.transcripts.get(session, ()))

    def add_steer(self, session: str, text: str) -> None:
        session, text = check_session_id(session), check_steer_text(text)
        with self.lock:
            self.backend.steers.setdefault(session, []).append(text)

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        with self.lock:
            return self.backend.steers.pop(session, [])


class PlainTwoStepSaveStore(PlainMemoryStore):
    """A plain store whose save is two locked steps: clear the transcript, then fill
    it. Each step is atomic; the save is not.

    In the wild: ``DELETE`` and ``INSERT`` as two autocommitted statements from a
    thread pool; a Redis ``DEL`` then ``RPUSH`` from a synchronous client.
    """

    def save(self, session: str, messages: Sequence[Message]) -> None:
        session, checked = check_session_id(session), check_messages(messages)
        with self.lock:
            self.backend.transcripts[session] = ()
        with self.lock:
            self.backend.transcripts[session] = (*self.backend.transcripts.get(session, ()), *checked)


class PlainTwoStepTakeStore(PlainMemoryStore):
    """A plain store whose take reads the queue in one locked step and trims what it
    read in a second: two takers between the steps both get the same steers.

    In the wild: ``SELECT`` then ``DELETE ... WHERE id IN (...)`` in autocommit from
    threads; ``LRANGE`` then ``LTRIM`` from a synchronous Redis client.
    """

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        with self.lock:
            taken = list(self.backend.steers.get(session, []))
        with self.lock:
            del self.backend.steers.get(session, [])[: len(taken)]
        return taken


class ForgetfulStore(MemoryStore):
    """Saves to a session after its 11th are silently dropped.

    In the wild: a per-session row or item limit reached without an error (a capped
    collection, a ``LIMIT`` on an upsert batch, a quota layer that swallows its error).
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.saves: Counter[str] = Counter()

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        self.saves[check_session_id(session)] += 1
        if self.saves[session] <= 11:
            await super().save(session, messages)


class ReusedResultListStore(MemoryStore):
    """Each handle returns one and the same list from every ``messages()`` call,
    refilled each time, so a later call changes what an earlier call returned.

    In the wild: a buffer reused to avoid allocations; a cursor's result list handed
    out directly.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.result: list[Message] = []

    async def messages(self, session: str) -> list[Message]:
        stored = await super().messages(session)
        self.result.clear()
        self.result.extend(stored)
        return self.result


_NOTHING: list[Message] = []


class SharedEmptyDefaultStore(MemoryStore):
    """Every never-used session gets the same module-level ``[]``.

    In the wild: ``return self.data.get(key, EMPTY)``, ``def messages(..., default=[])``.
    """

    async def messages(self, session: str) -> list[Message]:
        stored = await super().messages(session)
        return stored if stored else _NOTHING


class NegativeSteerCacheStore(MemoryStore):
    """A handle that found a session's queue empty answers ``[]`` without asking the
    backend again, until it adds a steer itself.

    In the wild: a per-process "nothing queued" cache to save round trips on every
    model request, invalidated only by this process's own writes.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.empty: set[str] = set()

    async def add_steer(self, session: str, text: str) -> None:
        await super().add_steer(session, text)
        self.empty.discard(session)

    async def take_steers(self, session: str) -> list[str]:
        if check_session_id(session) in self.empty:
            return []
        taken = await super().take_steers(session)
        if not taken:
            self.empty.add(session)
        return taken


# --- factories -------------------------------------------------------------------------


# --- round 3: fields at their limits, key schemes, stories ------------------------------


class ToolResultTruncatingStore(_RewritingStore):
    """Tool results cut to 65,535 UTF-8 bytes (message text is kept whole).

    In the wild: a ``tool_output TEXT`` column beside a ``LONGTEXT`` content column; a
    result "summarized" to fit a field limit.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, ToolResult):
            return replace(part, content=part.content.encode("utf-8")[:TEXT_LIMIT].decode("utf-8", "ignore"))
        return part


class ToolNameTruncatingStore(_RewritingStore):
    """Tool names cut to 64 characters (the contract allows 256 bytes).

    In the wild: a ``tool_name VARCHAR(64)`` column sized by OpenAI's function-name
    limit, on a server outside strict mode; ``name[:64]`` "to fit the provider".
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, ToolCall):
            return replace(part, name=part.name[:64])
        return part


class AttachmentTruncatingStore(_RewritingStore):
    """Attachment bytes cut to 65,535 bytes (message text is kept whole).

    In the wild: a MySQL/MariaDB ``BLOB`` column (64 KiB) beside ``LONGTEXT`` content,
    on a server outside strict mode.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, Attachment):
            return replace(part, data=part.data[:TEXT_LIMIT])
        return part


class NulRefusingTruncatingStore(TruncatingStore):
    """Refuses NUL (as Postgres ``text`` does) and cuts text at 65,535 bytes. While the
    big values held NUL, the refusal hid the truncation.

    In the wild: a Postgres store with a ``varchar(65535)``-style check, or a MySQL
    ``TEXT`` behind a NUL-refusing driver layer.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        if "\\x00" in repr(check_messages(messages)):
            raise StoreError(f"save to session {session!r} failed: invalid byte sequence for encoding "
                             "UTF8: 0x00")
        await super().save(session, messages)


class MediaTypeNormalizingStore(_RewritingStore):
    """Attachment media types lower-cased and trimmed ("normalized") before storing.

    In the wild: MIME parsing layers (``email.message``'s ``get_content_type()``
    lower-cases), HTTP frameworks that normalize ``Content-Type``.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, Attachment):
            return replace(part, media_type=part.media_type.strip().lower())
        return part


class RecentSessionsStore(MemoryStore):
    """Keeps only the 64 most recently written sessions: older ones are evicted.

    In the wild: an LRU cache answering for the backend, a capped collection, Redis
    under ``maxmemory`` with an ``allkeys-lru`` policy.
    """

    LIMIT = 64

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        await super().save(session, messages)
        transcripts = self.backend.transcripts
        transcripts[session] = transcripts.pop(session)  # most recent last
        while len(transcripts) > self.LIMIT:
            del transcripts[next(iter(transcripts))]


class KeySchemeStore(MemoryStore):
    """Keys built as the OpenAI Agents SDK's ``RedisSession`` builds them: a hash at
    ``session:{id}`` and the messages' list at ``session:{id}:messages``, in one typed
    key space, so session ``x:messages``'s hash is session ``x``'s list (``WRONGTYPE``).
    """

    def replica(self) -> MemoryStore:
        return type(self)(self.backend)

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.keys: dict[str, tuple[str, Any]] = getattr(self.backend, "keys", {})
        self.backend.keys = self.keys  # type: ignore[attr-defined]

    def _typed(self, key: str, kind: str, default: Any) -> Any:
        have, value = self.keys.setdefault(key, (kind, default))
        if have != kind:
            raise StoreError("WRONGTYPE Operation against a key holding the wrong kind of value")
        return value

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session, checked = check_session_id(session), check_messages(messages)
        self._typed(f"session:{session}", "hash", {})["updated"] = len(checked)
        self._typed(f"session:{session}:messages", "list", [])[:] = checked

    async def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        return list(self._typed(f"session:{session}:messages", "list", []))

    async def add_steer(self, session: str, text: str) -> None:
        session = check_session_id(session)
        self._typed(f"session:{session}:steers", "list", []).append(check_steer_text(text))

    async def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        queue = self._typed(f"session:{session}:steers", "list", [])
        taken, queue[:] = list(queue), []
        return taken


class KeysByPatternStore(MemoryStore):
    """One key per message, ``t:{<id>}:<n>`` (the id in a hash tag, so ``x`` and
    ``x:messages`` stay apart), read back with ``SCAN MATCH t:{<id>}:*``: the id is not
    glob-escaped, so session ``k*`` also reads ``k``'s and ``kk``'s messages.

    In the wild: Redis stores that list a session's keys with ``SCAN``/``KEYS`` and a
    pattern built from the raw id; ``fnmatch`` over file or object names.
    """

    def replica(self) -> MemoryStore:
        return type(self)(self.backend)

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.keys: dict[str, Message] = getattr(self.backend, "keys", {})
        self.backend.keys = self.keys  # type: ignore[attr-defined]

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session, checked = check_session_id(session), check_messages(messages)
        for key in [k for k in self.keys if k.startswith(f"t:{{{session}}}:")]:
            del self.keys[key]
        for n, message in enumerate(checked):
            self.keys[f"t:{{{session}}}:{n:08d}"] = message

    async def messages(self, session: str) -> list[Message]:
        pattern = f"t:{{{check_session_id(session)}}}:*"
        return [self.keys[k] for k in sorted(self.keys) if fnmatch.fnmatchcase(k, pattern)]


class ToolCallsByIdStore(_RewritingStore):
    """A message's tool calls kept in a dict keyed by call id: two calls with one id
    (which the contract allows) become one.

    In the wild: ``{call.id: call for call in message.tool_calls}`` to "index" calls;
    a ``PRIMARY KEY (message_id, call_id)`` with ``ON CONFLICT DO UPDATE``.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        def merged(content: tuple[Content, ...]) -> tuple[Content, ...]:
            calls = {p.id: p for p in content if isinstance(p, ToolCall)}
            out = [p for p in content if not isinstance(p, ToolCall) or calls.get(p.id) is p]
            return tuple(out)

        checked = check_messages(messages)
        self.backend.transcripts[check_session_id(session)] = tuple(
            replace(m, content=merged(m.content)) for m in checked)


class PositionKeyedStore(MemoryStore):
    """Messages kept under their position as a string key and read back sorted by
    key: ``"0", "1", "10", "11", ..., "2"``.

    In the wild: a Redis hash or a key-value prefix scan keyed by ``str(i)``, a
    ``VARCHAR`` position column ordered as text.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session, checked = check_session_id(session), check_messages(messages)
        self.backend.transcripts[session] = tuple(
            m for _, m in sorted((str(i), m) for i, m in enumerate(checked)))


class PartsByKindStore(_RewritingStore):
    """Content parts regrouped by kind: text first, then tool calls, results, attachments.

    In the wild: a schema with one table (or field) per part kind, read back one kind
    after another.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        order = {Text: 0, ToolCall: 1, ToolResult: 2, Attachment: 3}
        checked = check_messages(messages)
        self.backend.transcripts[check_session_id(session)] = tuple(
            replace(m, content=tuple(sorted(m.content, key=lambda p: order[type(p)]))) for m in checked)


class ChunkBoundaryStore(MemoryStore):
    """Inserts a long transcript in chunks of 500 rows and loses the first row of every
    chunk after the first (an off-by-one at the chunk boundary).

    In the wild: hand-rolled batching around a driver's parameter limit (SQLite's 999
    variables, MySQL's ``max_allowed_packet``).
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        checked = check_messages(messages)
        await super().save(session, [m for i, m in enumerate(checked) if i < 500 or i % 500])


#: A character outside the BMP (4 bytes in UTF-8), which a utf8mb3 column refuses.
_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


class UnrelatedErrorsStore(MemoryStore):
    """Refuses NUL in one way and 4-byte characters in another, and works for
    everything else: two unrelated refusals, not a poisoned connection.

    In the wild: a Postgres ``text`` column (NUL) beside a MySQL ``utf8mb3`` one
    (emoji) in one application; any store with two unrelated limits.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        text = repr(check_messages(messages))
        if "\\x00" in text:
            raise StoreError(f"save to session {session!r} failed: invalid byte sequence for encoding "
                             "UTF8: 0x00")
        if _ASTRAL.search(text):  # as a column's charset check does, not a loop per character
            raise StoreError(f"save to session {session!r} failed: Incorrect string value for column "
                             "'content'")
        await super().save(session, messages)


class ExpiringStore(MemoryStore):
    """Every key expires 0.5 s after it was written.

    In the wild: ``SETEX``/``EXPIRE`` on every key "to keep Redis tidy", a MongoDB TTL
    index, a cache in front of the store that forgets.
    """

    TTL = 0.5

    def replica(self) -> MemoryStore:
        return type(self)(self.backend)

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.written: dict[str, float] = getattr(self.backend, "written", {})
        self.backend.written = self.written  # type: ignore[attr-defined]

    def _expire(self, session: str) -> None:
        if time.monotonic() - self.written.get(session, time.monotonic()) > self.TTL:
            self.backend.transcripts.pop(session, None)
            self.backend.steers.pop(session, None)

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        await super().save(session, messages)
        self.written[session] = time.monotonic()

    async def messages(self, session: str) -> list[Message]:
        self._expire(check_session_id(session))
        return await super().messages(session)

    async def add_steer(self, session: str, text: str) -> None:
        self._expire(check_session_id(session))
        await super().add_steer(session, text)
        self.written[session] = time.monotonic()

    async def take_steers(self, session: str) -> list[str]:
        self._expire(check_session_id(session))
        return await super().take_steers(session)


# --- cells of the input model (storetest._engine.inputs) -------------------------------


class CharsChosenByteColumnStore(_RewritingStore):
    """Message text of up to 4,000 characters kept in a ``VARCHAR2(4000 BYTE)`` column,
    longer text in a ``CLOB``: text of at most 4,000 characters but more than 4,000
    bytes is cut at 4,000 bytes (a multibyte character split there is dropped).

    In the wild: Oracle stores choosing the column by ``len(text)`` while the column
    counts bytes (``NLS_LENGTH_SEMANTICS=BYTE``, the default).
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, Text) and len(part.text) <= 4000:
            return Text(part.text.encode("utf-8")[:4000].decode("utf-8", "ignore"))
        return part


class ToolName255CharsStore(_RewritingStore):
    """Tool names kept in a ``VARCHAR(255)`` column (255 characters), though the
    contract allows 256 bytes: a 256-character ASCII name loses its last character.

    In the wild: MySQL ``VARCHAR(255)`` in non-strict ``sql_mode``, the default width
    of many ORMs' string columns.
    """

    @staticmethod
    def rewrite(part: Content) -> Content:
        if isinstance(part, ToolCall) and len(part.name) > 255:
            return ToolCall(part.id, part.name[:255], part.arguments)
        return part


class PercentDecodedIdStore(MemoryStore):
    """Session ids percent-decoded on their way in: ``%41`` and ``A`` are one session.

    In the wild: an HTTP store whose session id travels in a URL path that the server
    framework decodes, while the client did not encode it.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        await super().save(urllib.parse.unquote(check_session_id(session)), messages)

    async def messages(self, session: str) -> list[Message]:
        return await super().messages(urllib.parse.unquote(check_session_id(session)))

    async def add_steer(self, session: str, text: str) -> None:
        await super().add_steer(urllib.parse.unquote(check_session_id(session)), text)

    async def take_steers(self, session: str) -> list[str]:
        return await super().take_steers(urllib.parse.unquote(check_session_id(session)))


class SlashPrefixScanStore(MemoryStore):
    """Messages kept one object per message at ``<id>/<position>`` and read back by
    listing the prefix ``<id>/``: session ``x`` also reads ``x/y``'s messages, and
    saving ``x`` deletes them.

    In the wild: stores on object storage (S3, GCS, a directory tree) that list by a
    key prefix without escaping ``/`` in the id.
    """

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        super().__init__(backend)
        self.objects: dict[str, Message] = {}

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        prefix = check_session_id(session) + "/"
        checked = check_messages(messages)
        for key in [k for k in self.objects if k.startswith(prefix)]:
            del self.objects[key]
        for i, message in enumerate(checked):
            self.objects[f"{prefix}{i:08d}"] = message

    async def messages(self, session: str) -> list[Message]:
        prefix = check_session_id(session) + "/"
        return [self.objects[k] for k in sorted(self.objects) if k.startswith(prefix)]


class ClearByPrefixStore(MemoryStore):
    """Saving an empty transcript deletes every session whose id starts with the id:
    clearing ``x`` empties ``x!y``, ``x/y``, ``x:y``.

    In the wild: ``DELETE FROM messages WHERE session LIKE 'x%'`` (or a key-prefix
    delete) used to clear a session, while reads match the id exactly.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        checked = check_messages(messages)
        if not checked:
            for key in [k for k in self.backend.transcripts if k.startswith(session)]:
                del self.backend.transcripts[key]
            return
        self.backend.transcripts[session] = checked


class ByteBudgetTakeStore(MemoryStore):
    """``take_steers`` returns the oldest steers that fit a 256 KiB fetch budget (at
    least one) and leaves the rest queued for a later take.

    In the wild: a take that reads one page of a size-limited fetch (a Kafka
    ``fetch.max.bytes``, a DynamoDB 1 MB query page) and deletes what it read.
    """

    async def take_steers(self, session: str) -> list[str]:
        queue = self.backend.steers.get(check_session_id(session), [])
        taken, used = 0, 0
        while taken < len(queue) and (taken == 0 or used + len(queue[taken].encode()) <= 2**18):
            used += len(queue[taken].encode())
            taken += 1
        out, queue[:taken] = queue[:taken], []
        return out


def jsonb_arguments_store() -> JsonbArgumentsStore:
    """The jsonb-style store, for ``storetest check`` and the end-to-end test."""
    return JsonbArgumentsStore()


def jsonb_arguments_replica(primary: JsonbArgumentsStore) -> JsonbArgumentsStore:
    return JsonbArgumentsStore(primary.backend)


def _replica(primary: Any) -> Any:
    return primary.replica()


def _broken(
    name: str, cls: type[MemoryStore] | type[PlainMemoryStore], bug: str, wild: str, clause: str, diagnosis: str,
    *, replica: bool = False, racy: bool = False, profile: str = "fast", idle: float | None = None,
) -> BrokenStore:
    def factory() -> Any:
        return cls()

    factory.__name__ = factory.__qualname__ = "make_" + name.replace("-", "_")
    return BrokenStore(name, bug, wild, clause, diagnosis, factory,
                       replica=_replica if replica else None, racy=racy, profile=profile, idle=idle)


BROKEN: list[BrokenStore] = [
    _broken("memory-varchar2-4000-bytes", CharsChosenByteColumnStore,
            "text of up to 4,000 characters cut at 4,000 bytes",
            "Oracle VARCHAR2(4000 BYTE) chosen by len(text), CLOB above",
            "every_field_round_trips_at_every_size", "Text.text: truncated at"),
    _broken("memory-tool-name-255-chars", ToolName255CharsStore, "tool names cut to 255 characters",
            "a VARCHAR(255) tool_name column, non-strict sql_mode", "every_field_round_trips_at_every_size",
            "ToolCall.name: truncated at"),
    _broken("memory-percent-decoded-ids", PercentDecodedIdStore, "session ids percent-decoded on the way in",
            "an id in a URL path the server decodes", "related_ids_stay_apart", "percent-escapes"),
    _broken("memory-slash-prefix-scan", SlashPrefixScanStore,
            "messages at <id>/<position>, read and cleared by listing the prefix <id>/",
            "object-storage and directory stores listing by key prefix", "related_ids_stay_apart",
            "a prefix scan under '/'"),
    _broken("memory-clear-by-prefix", ClearByPrefixStore,
            "saving [] deletes every session whose id starts with the id", "DELETE ... WHERE session LIKE 'x%'",
            "related_ids_stay_apart", "clearing"),
    _broken("memory-take-byte-budget", ByteBudgetTakeStore,
            "a take returns only the steers that fit 256 KiB, the rest later",
            "a take reading one size-limited fetch page", "steers_are_taken_in_order_exactly_once",
            "a take capped by a page size or a byte budget"),
    _broken("memory-jsonb-arguments", JsonbArgumentsStore,
            "tool-call arguments parsed and re-serialized as jsonb does",
            "the seed Go SDK (json.RawMessage in jsonb); LangChain's parsed tool_calls[].args",
            "tool_arguments_are_kept_verbatim", "raw JSON re-encoded"),
    _broken("memory-nfc", NfcStore, "message text normalized to NFC",
            "input sanitizers calling unicodedata.normalize; NFD/NFC file-system round trips",
            "transcript_round_trips_exactly", "Unicode normalized to NFC"),
    _broken("memory-rstrip", RstripStore, "trailing whitespace stripped from message text",
            "form/template layers that strip() every field; CHAR columns",
            "transcript_round_trips_exactly", "trailing whitespace stripped"),
    _broken("memory-crlf", CrlfStore, "CRLF turned into LF in message text",
            "text-mode file I/O, git autocrlf, newline-normalizing HTTP layers",
            "transcript_round_trips_exactly", "CRLF turned into LF"),
    _broken("memory-nul-stripped", NulStrippingStore, "NUL characters dropped from message text",
            "the workaround for Postgres refusing NUL in text/jsonb; C-string layers",
            "transcript_round_trips_exactly", "NUL lost"),
    _broken("memory-truncated-64k", TruncatingStore, "message text cut at 65,535 bytes",
            "MySQL TEXT outside strict mode; VARCHAR(n); item-size limits",
            "every_field_round_trips_at_every_size", "cut at 65535 bytes mid-character"),
    _broken("memory-attachment-as-text", AttachmentAsTextStore,
            "attachment bytes decoded as UTF-8 and encoded again",
            "binary put in a TEXT/str field; decode(errors='replace') to make JSON happy",
            "transcript_round_trips_exactly", "attachment bytes decoded as text"),
    _broken("memory-save-appends", AppendingStore, "save appends instead of replacing",
            "INSERT-only saves; RPUSH without DEL; MongoDB $push instead of $set",
            "save_replaces_the_transcript", "appended instead of replaced"),
    _broken("memory-save-ignores-empty", IgnoresEmptyStore, "save([]) leaves the old transcript",
            "`if not messages: return`; bulk inserts that skip an empty batch",
            "save_replaces_the_transcript", "saving an empty list left the old transcript"),
    _broken("memory-torn-save", TornSaveStore,
            "save deletes, then pushes messages one command at a time, no transaction",
            "Redis DEL + RPUSH without MULTI/EXEC; SQL DELETE + INSERTs in autocommit",
            "concurrent_saves_leave_one_transcript", "transcript torn", racy=True),
    _broken("memory-steers-deduplicated", DedupSteersStore, "identical steers merged (a set)",
            "Redis SADD/ZADD queues; UNIQUE (session, text) with ON CONFLICT DO NOTHING",
            "steers_are_taken_in_order_exactly_once", "identical steers merged into one"),
    _broken("memory-steers-lifo", LifoSteersStore, "steers taken newest first",
            "LPUSH + LRANGE; ORDER BY id DESC copied from a 'latest' query; a list as a stack",
            "steers_are_taken_in_order_exactly_once", "last-in-first-out"),
    _broken("memory-take-without-delete", PeekingTakeStore,
            "take_steers returns the steers but never deletes them",
            "a take that SELECTs and forgets the DELETE (or never commits); LRANGE without LTRIM",
            "steers_are_taken_in_order_exactly_once", "steers taken twice"),
    _broken("memory-unlocked-take", UnlockedTakeStore,
            "take reads the queue, then trims it in a second command, no lock",
            "Redis LRANGE then LTRIM without MULTI/WATCH or a Lua script",
            "steers_are_taken_exactly_once_under_concurrency", "duplicated", racy=True),
    _broken("memory-per-handle-lock", PerHandleLockStore,
            "take guarded by a lock that only holds inside one handle/process",
            "asyncio.Lock / threading.Lock / sync.Mutex making a shared-backend take 'atomic'",
            "steers_are_taken_once_across_replicas", "duplicated", replica=True, racy=True),
    _broken("memory-returns-own-list", OwnListStore, "messages() returns the store's own list",
            "`return self._data[key]` in in-memory stores and caches",
            "stored_data_is_not_aliased", "messages() returned the store's own list"),
    _broken("memory-keeps-callers-list", KeepsCallersListStore,
            "save keeps the caller's list, not a copy",
            "`self._data[key] = messages` in in-memory stores and test doubles",
            "stored_data_is_not_aliased", "the store kept the list passed to save"),
    _broken("memory-stale-replica-cache", StaleCacheStore,
            "each handle reads from a cache of what it saved itself",
            "per-process read-through caches with no cross-replica invalidation",
            "replicas_share_transcripts", "stale read", replica=True),
    _broken("memory-id-lowercased", LowercasedIdStore, "sessions keyed by the id lower-cased",
            "ids normalized with .lower(); ILIKE or case-folding lookups",
            "sessions_are_isolated", "differ only by case"),
    _broken("memory-id-truncated-64", TruncatedIdStore, "sessions keyed by the id's first 64 chars",
            "VARCHAR(64) keys outside strict mode; id[:64] to fit a key or file name",
            "sessions_are_isolated", "differ only after their first"),
    _broken("memory-id-hash-prefix", HashPrefixIdStore,
            "sessions keyed by a 1-hex-digit SHA-1 prefix (16 shards, id not kept)",
            "hash-prefix sharding that forgets the full id; a short hash as the whole key",
            "sessions_are_isolated", "ids hashed or truncated"),
    _broken("memory-plain-two-step-save", PlainTwoStepSaveStore,
            "a plain (threaded) save in two locked steps: clear, then fill",
            "DELETE then INSERT autocommitted from a thread pool; DEL then RPUSH, sync client",
            "concurrent_saves_leave_one_transcript", "transcript torn", racy=True),
    _broken("memory-plain-two-step-take", PlainTwoStepTakeStore,
            "a plain (threaded) take in two locked steps: read, then trim",
            "SELECT then DELETE autocommitted from threads; LRANGE then LTRIM, sync client",
            "steers_are_taken_exactly_once_under_concurrency", "duplicated", racy=True),
    _broken("memory-forgets-after-11-saves", ForgetfulStore,
            "saves to a session after its 11th are silently dropped",
            "per-session row or item caps that swallow their error",
            "long_histories_keep_every_save", "the save was lost"),
    _broken("memory-reused-result-list", ReusedResultListStore,
            "every messages() call returns one reused list, refilled",
            "buffers reused to avoid allocations; a cursor's list handed out",
            "stored_data_is_not_aliased", "a later call changed a list an earlier messages() returned"),
    _broken("memory-shared-empty-default", SharedEmptyDefaultStore,
            "every unknown session gets one shared module-level []",
            "data.get(key, EMPTY); a mutable default argument",
            "stored_data_is_not_aliased", "one shared [] for every unknown session"),
    _broken("memory-negative-steer-cache", NegativeSteerCacheStore,
            "a handle caches 'queue empty' and stops asking until it adds a steer itself",
            "per-process caches that save a round trip per model request",
            "steers_are_taken_once_across_replicas", "cached \"queue is empty\"", replica=True),
    # Round 3: each passed its clause before (or was caught with the wrong story).
    _broken("memory-take-first-thousand", TakeFirstThousandStore,
            "take_steers returns the first 1,000 steers and deletes them all",
            "Redis MULTI; LRANGE key 0 999; DEL key; EXEC; a SELECT ... LIMIT 1000 before the DELETE",
            "steers_are_taken_in_order_exactly_once", "1 steer(s) lost: 'queued #1000 "),
    _broken("memory-tool-result-truncated", ToolResultTruncatingStore, "tool results cut to 65,535 bytes",
            "a tool_output TEXT column beside a LONGTEXT content column",
            "every_field_round_trips_at_every_size", "ToolResult.content: truncated at 65532 bytes of 65536"),
    _broken("memory-tool-name-truncated", ToolNameTruncatingStore, "tool names cut to 64 characters",
            "a tool_name VARCHAR(64) column sized by a provider's function-name limit, non-strict sql_mode",
            "transcript_round_trips_exactly", "ToolCall.name: truncated at"),
    _broken("memory-attachment-truncated", AttachmentTruncatingStore, "attachment bytes cut to 65,535 bytes",
            "a BLOB column beside LONGTEXT content, non-strict sql_mode",
            "every_field_round_trips_at_every_size", "Attachment.data: truncated at 65535 bytes"),
    _broken("memory-nul-refused-and-truncated", NulRefusingTruncatingStore,
            "NUL refused and text cut to 65,535 bytes: the refusal hid the size limit",
            "a Postgres store behind a length-limited column",
            "every_field_round_trips_at_every_size", "cut at 65535 bytes mid-character"),
    _broken("memory-media-type-normalized", MediaTypeNormalizingStore,
            "attachment media types lower-cased and trimmed",
            "MIME layers (get_content_type() lower-cases), Content-Type normalizing frameworks",
            "transcript_round_trips_exactly", "media_type: case changed"),
    _broken("memory-tool-calls-by-id", ToolCallsByIdStore, "a message's tool calls kept in a dict by call id",
            "{call.id: call ...} indexes; PRIMARY KEY (message_id, call_id) with an upsert",
            "transcript_round_trips_exactly", "3 content parts saved, 2 came back: 1 content part(s) lost: #0"),
    _broken("memory-recent-sessions-only", RecentSessionsStore, "only the 64 most recent sessions kept",
            "an LRU cache answering for the backend; Redis allkeys-lru under maxmemory",
            "many_sessions_are_all_kept", "was forgotten after the later ones were written"),
    _broken("memory-key-scheme", KeySchemeStore,
            "keys session:{id} and session:{id}:messages in one key space (RedisSession's layout)",
            "the OpenAI Agents SDK's RedisSession: session 'x:messages' shares a key with 'x'",
            "sessions_are_isolated", "prefix:<id>:<kind> collide"),
    _broken("memory-keys-by-pattern", KeysByPatternStore,
            "one key per message, read back by SCAN MATCH t:{<id>}:* with the id unescaped",
            "Redis stores that list a session's keys with SCAN MATCH built from the raw id; fnmatch",
            "sessions_are_isolated", "glob characters"),
    _broken("memory-positions-as-text", PositionKeyedStore, "messages read back in text order of '0', '1', '10'",
            "a Redis hash or key prefix scan keyed by str(position); a VARCHAR position column",
            "transcript_round_trips_exactly", "messages reordered: they came back in the saved positions"),
    _broken("memory-parts-by-kind", PartsByKindStore, "content parts regrouped by kind",
            "one table or field per part kind, read back kind after kind",
            "transcript_round_trips_exactly", "content parts reordered"),
    _broken("memory-chunk-boundary", ChunkBoundaryStore, "the first row of every 500-row chunk after the first lost",
            "hand-rolled batching around a parameter or packet limit",
            "large_values_round_trip", "3 message(s) lost: #500 (user 'long #500')"),
    _broken("memory-unrelated-errors", UnrelatedErrorsStore, "NUL and 4-byte characters refused in two unrelated ways",
            "two unrelated column limits in one store (text refusing NUL, utf8mb3 refusing emoji)",
            "save_replaces_the_transcript", "raised StoreError: save to session"),
    _broken("memory-expiring", ExpiringStore, "every key expires 0.5 s after it was written",
            "SETEX/EXPIRE on every key; a MongoDB TTL index; a forgetful cache in front",
            "data_survives_idle", "the transcript expired", idle=1.0),
]
