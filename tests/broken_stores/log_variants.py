"""Broken variants of the in-memory log store (:mod:`reference_stores.memory_log`).

Each class changes one method of :class:`MemoryLogStore` (or one line in it) to carry
one bug that hand-written entry logs really have. As in :mod:`memory_variants`, an
``await asyncio.sleep(0)`` stands for the round trip between two commands to a server:
it is where another task's command lands.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, timedelta, timezone
from decimal import Decimal
from urllib.parse import unquote

from reference_stores.memory_log import MemoryLogBackend, MemoryLogStore
from storetest.contract import check_session_id
from storetest.entries import Compaction, Custom, Entry, check_batch, check_create, check_entries
from storetest.projections import path
from tests.broken_stores import BrokenStore

# --- values changed on the way in ------------------------------------------------------


class _RewritingLogStore(MemoryLogStore):
    """Appends each entry through ``rewrite`` (the broken layer under test)."""

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        return entry

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_batch(session, entries, self.backend.ids.get(session, ()))
        self.backend.write(session, [self.rewrite(e) for e in batch])

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        session = check_session_id(session)
        batch = check_create(session, entries)
        if self.backend.logs.get(session):
            return False
        self.backend.write(session, [self.rewrite(e) for e in batch])
        return True


class SecondsLogStore(_RewritingLogStore):
    """Creation times truncated to whole seconds.

    In the wild: a MySQL ``DATETIME``/``TIMESTAMP`` column without ``(6)``, Unix
    timestamps stored as integers (``int(time.time())``), ``strftime("%Y-%m-%dT%H:%M:%S")``.
    """

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        return replace(entry, created_at=entry.created_at.replace(microsecond=0))


class MillisecondsLogStore(_RewritingLogStore):
    """Creation times truncated to milliseconds.

    In the wild: MongoDB's BSON date, JavaScript ``Date`` (pi-mono's JSONL timestamps
    come from ``toISOString()``), Java ``Instant.toEpochMilli``, ``DATETIME(3)``.
    """

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        t = entry.created_at
        return replace(entry, created_at=t.replace(microsecond=t.microsecond // 1000 * 1000))


#: The database server's local zone in :class:`NaiveLocalTimeLogStore`.
SERVER_ZONE = timezone(timedelta(hours=-5))


class NaiveLocalTimeLogStore(_RewritingLogStore):
    """Creation times stored as naive local wall time (the server's zone, UTC-5 here)
    and read back as if they were UTC: every instant shifts, and the offset is lost.

    In the wild: a Postgres ``timestamp`` (without time zone) column fed an aware value
    (converted to the session's ``TimeZone``, then the zone dropped) and read back with
    ``.replace(tzinfo=timezone.utc)``; ``datetime.now()`` / ``utcfromtimestamp`` mixups.
    """

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        wall = entry.created_at.astimezone(SERVER_ZONE).replace(tzinfo=None)
        return replace(entry, created_at=wall.replace(tzinfo=UTC))


class UtcOffsetLogStore(_RewritingLogStore):
    """Creation times come back in UTC: the instant is right, the writer's offset gone.

    In the wild: Postgres ``timestamptz`` (it stores an instant; asyncpg returns UTC),
    MongoDB dates, ``datetime.astimezone(timezone.utc)`` before ``isoformat()``.
    """

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        return replace(entry, created_at=entry.created_at.astimezone(UTC))


def _jsonb_like(text: str) -> str:
    """Postgres ``jsonb``: last duplicate key wins, keys shorter-first then bytewise,
    whitespace normalized."""

    def obj(pairs: list[tuple[str, object]]) -> dict[str, object]:
        merged = dict(pairs)
        return {k: merged[k] for k in sorted(merged, key=lambda k: (len(k.encode()), k.encode()))}

    def number(token: str) -> float | int:
        value = float(token)  # jsonb's numeric turns 1e400 into a 401-digit integer
        return value if math.isfinite(value) else int(Decimal(token))

    return json.dumps(json.loads(text, object_pairs_hook=obj, parse_float=number), ensure_ascii=False)


class JsonbCustomLogStore(_RewritingLogStore):
    """Custom entries' JSON parsed and re-serialized, as a ``jsonb`` column does.

    In the wild: custom data in a Postgres ``jsonb`` or MySQL ``JSON`` column, or kept
    as a parsed ``dict`` (``json.loads`` on the way in, ``json.dumps`` on the way out).
    """

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        if isinstance(entry.payload, Custom):
            return replace(entry, payload=Custom(entry.payload.kind, _jsonb_like(entry.payload.data)))
        return entry


class MetaAsMessageLogStore(_RewritingLogStore):
    """Meta entries stored as messages (the kind is not kept, only the message).

    In the wild: a log store built on an existing ``messages`` table (role, content)
    with no kind column; LangChain-style histories that keep only ``BaseMessage``s.
    """

    @staticmethod
    def rewrite(entry: Entry) -> Entry:
        return replace(entry, kind="message") if entry.kind == "meta" else entry


# --- batches and ids -------------------------------------------------------------------


class ReusedIdsLogStore(MemoryLogStore):
    """Entry ids are not checked for uniqueness: a reused id is stored a second time.

    In the wild: an entries table with no ``UNIQUE (session, id)``, a JSONL file
    appended to without reading it first, a Redis list ``RPUSH``.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_entries(entries)
        known = set(self.backend.ids.get(session, ()))
        for entry in batch:
            if entry.parent_id is not None and entry.parent_id not in known:
                raise ValueError(f"entry {entry.id!r}: unknown parent {entry.parent_id!r}")
            known.add(entry.id)
        self.backend.write(session, batch)


class UpsertByIdLogStore(MemoryLogStore):
    """An entry with a reused id replaces the earlier one in place.

    In the wild: ``INSERT OR REPLACE`` / ``ON CONFLICT (session, id) DO UPDATE``,
    MongoDB ``replace_one(..., upsert=True)``, a dict keyed by entry id.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_entries(entries)
        log = self.backend.logs.setdefault(session, [])
        ids = self.backend.ids.setdefault(session, set())
        for entry in batch:
            if entry.parent_id is not None and entry.parent_id not in ids:
                raise ValueError(f"entry {entry.id!r}: unknown parent {entry.parent_id!r}")
            if entry.id in ids:
                log[[e.id for e in log].index(entry.id)] = entry
            else:
                log.append(entry)
                ids.add(entry.id)


class OrphansLogStore(MemoryLogStore):
    """Parents are not checked: an entry whose parent is in no session is accepted.

    In the wild: a ``parent_id`` column with no foreign key (or a foreign key to the
    entry id across all sessions), JSONL logs that never read before appending.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_entries(entries)
        ids = self.backend.ids.get(session, set())
        fresh = [e.id for e in batch]
        if len(set(fresh)) != len(fresh) or ids & set(fresh):
            raise ValueError(f"session {session!r}: duplicate entry id")
        self.backend.write(session, batch)


class OneEntryUncheckedLogStore(MemoryLogStore):
    """A batch of one entry goes down a fast path of its own that skips the checks: an
    entry whose parent is in no session, or whose id the session has, is written.

    In the wild: a single-row ``INSERT`` written for the common append beside the batch
    statement, its parent check left out (caught in review of ``PostgresLogStore``'s own
    one-entry statement, which the batch-only bad inputs never reached).
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        if len(entries) == 1:
            self.backend.write(check_session_id(session), check_entries(entries))
            return
        await super().append(session, entries)


class HalfWrittenBatchLogStore(MemoryLogStore):
    """A batch is checked and written entry by entry: a bad entry is refused after the
    ones before it have landed.

    In the wild: a loop of ``INSERT``s in autocommit mode, ``insert_many(ordered=True)``
    in MongoDB (stops at the first duplicate, keeps the rest), one JSONL line per write.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        for entry in check_entries(entries):
            self.backend.write(session, check_batch(session, [entry], self.backend.ids.get(session, ())))


class EntryByEntryLogStore(MemoryLogStore):
    """A checked batch is written one entry per command, no transaction: a reader can
    see half a batch, and two writers' batches interleave.

    In the wild: ``RPUSH`` per entry without ``MULTI``/``EXEC``, ``INSERT``s in autocommit,
    a JSONL writer that flushes after each line with no lock.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_batch(session, entries, self.backend.ids.get(session, ()))
        for entry in batch:
            await asyncio.sleep(0)  # the round trip before the next write
            self.backend.write(session, [entry])


class GlobalIdsLogStore(MemoryLogStore):
    """Entry ids unique across the whole backend, not per session: a fork (which copies
    ids) is refused, and two sessions cannot both use an id.

    In the wild: ``PRIMARY KEY (id)`` instead of ``(session_id, id)``; MongoDB ``_id``
    set to the entry id in one collection for all sessions.
    """

    def _taken(self) -> set[str]:
        return {i for ids in self.backend.ids.values() for i in ids}

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_batch(session, entries, self.backend.ids.get(session, ()))
        clash = self._taken() & {e.id for e in batch}
        if clash:
            raise ValueError(f"duplicate key value violates unique constraint: id {min(clash)!r}")
        self.backend.write(session, batch)

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        session = check_session_id(session)
        check_create(session, entries)
        if self.backend.logs.get(session):
            return False
        await self.append(session, entries)
        return True


# --- concurrency ----------------------------------------------------------------------


class StaleSnapshotLogStore(MemoryLogStore):
    """``append`` reads the whole log, then writes it back with the batch added: a
    concurrent writer's entries, appended in between, are lost.

    In the wild: a log kept as one JSON document or blob (read, modify, write with no
    version check), a JSONL file rewritten instead of opened with ``O_APPEND``,
    ``GET``/``SET`` of a Redis string.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        snapshot = list(self.backend.logs.get(session, ()))  # GET
        batch = check_batch(session, entries, {e.id for e in snapshot})
        await asyncio.sleep(0)  # the round trip before the SET
        self.backend.logs[session] = snapshot + list(batch)
        self.backend.ids[session] = {e.id for e in self.backend.logs[session]}


class PerHandleLockLogStore(StaleSnapshotLogStore):
    """The stale-snapshot append, guarded by an ``asyncio.Lock`` that belongs to the
    handle: right within one process, entries lost across replicas.

    In the wild: a ``threading.Lock``/``asyncio.Lock`` (or ``flock`` on a file each
    host has its own copy of) making read-modify-write "atomic" on one process only.
    """

    def __init__(self, backend: MemoryLogBackend | None = None) -> None:
        super().__init__(backend)
        self._lock = asyncio.Lock()

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        async with self._lock:
            await super().append(session, entries)


class RacyCreateLogStore(MemoryLogStore):
    """``create`` checks that the session is empty, then writes in a second command:
    two racing creates both win, and the session gets both batches.

    In the wild: ``SELECT count(*)`` then ``INSERT`` without a unique constraint or
    ``SERIALIZABLE``; ``os.path.exists`` then ``open(path, "w")`` instead of ``"x"``.
    """

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        session = check_session_id(session)
        batch = check_create(session, entries)
        if self.backend.logs.get(session):
            return False
        await asyncio.sleep(0)  # the round trip before the INSERT
        self.backend.write(session, batch)
        return True


class CreateAppendsLogStore(MemoryLogStore):
    """``create`` is ``append``: it never checks that the session is new, so a fork into
    an existing session mixes two conversations.

    In the wild: ``INSERT`` with no existence check (``create`` written as an alias of
    ``append``), ``open(path, "a")`` where ``"x"`` was meant.
    """

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        await self.append(session, check_create(check_session_id(session), entries))
        return True


class StaleReplicaCacheLogStore(MemoryLogStore):
    """Each handle caches a session's log the first time it reads or writes it and
    serves reads from that cache: it never sees another replica's appends.

    In the wild: a per-process read-through cache of the log (a dict, ``lru_cache``)
    kept up to date with the handle's own writes only.
    """

    def __init__(self, backend: MemoryLogBackend | None = None) -> None:
        super().__init__(backend)
        self.cache: dict[str, list[Entry]] = {}

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        await super().append(session, entries)
        if session in self.cache:
            self.cache[session] += entries  # its own writes, never another replica's

    async def entries(self, session: str) -> list[Entry]:
        session = check_session_id(session)
        if session not in self.cache:
            self.cache[session] = await super().entries(session)
        return list(self.cache[session])


class PlainLogStore:
    """Not broken: the memory log store with plain methods, for threads (a lock shared by
    its replicas guards the backend). The base of the plain variants, and their control."""

    def __init__(self, backend: MemoryLogBackend | None = None, lock: threading.Lock | None = None) -> None:
        self.backend = backend if backend is not None else MemoryLogBackend()
        self.lock = lock if lock is not None else threading.Lock()

    def replica(self) -> PlainLogStore:
        return type(self)(self.backend, self.lock)

    def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        with self.lock:
            self.backend.write(session, check_batch(session, entries, self.backend.ids.get(session, ())))

    def entries(self, session: str) -> list[Entry]:
        session = check_session_id(session)
        with self.lock:
            return list(self.backend.logs.get(session, ()))

    def create(self, session: str, entries: Sequence[Entry]) -> bool:
        session = check_session_id(session)
        batch = check_create(session, entries)
        with self.lock:
            if self.backend.logs.get(session):
                return False
            self.backend.write(session, batch)
            return True


class PlainUnlockedAppendLogStore(PlainLogStore):
    """A plain store whose ``append`` reads the log, then writes it back with the batch
    added, with no lock: two threads appending at once lose one's entries.

    In the wild: a JSONL session file read, extended and rewritten by a threaded server
    (no ``flock``, no ``O_APPEND``); a dict-of-lists store shared by worker threads.
    """

    def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        snapshot = list(self.backend.logs.get(session, ()))
        batch = check_batch(session, entries, {e.id for e in snapshot})
        self.backend.logs[session] = snapshot + list(batch)
        self.backend.ids[session] = {e.id for e in self.backend.logs[session]}


# --- reads -----------------------------------------------------------------------------


class SortedByTimeLogStore(MemoryLogStore):
    """``entries()`` sorted by creation time instead of append order: with two
    replicas' clocks apart, a reply comes back before its question, and the leaf is
    wrong.

    In the wild: ``ORDER BY created_at`` (no sequence column), a time-based sort key
    (DynamoDB, Cassandra clustering by timestamp), merging JSONL files by timestamp.
    """

    async def entries(self, session: str) -> list[Entry]:
        return sorted(await super().entries(session), key=lambda e: e.created_at)


class OwnListLogStore(MemoryLogStore):
    """``entries()`` returns the list the store keeps, so a caller editing the result
    edits the log (earlier entries change, or vanish).

    In the wild: ``return self._logs[session]`` in in-memory stores and caches.
    """

    async def entries(self, session: str) -> list[Entry]:
        session = check_session_id(session)
        return self.backend.logs.setdefault(session, [])


class LowercasedSessionLogStore(MemoryLogStore):
    """Sessions keyed by the id lower-cased: ``"A"`` and ``"a"`` share one log.

    In the wild: a case-insensitive collation on the session column (MariaDB's default,
    MySQL's ``utf8mb4_0900_ai_ci``), ids ``.lower()``-ed on the way in.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        await super().append(check_session_id(session).lower(), entries)

    async def entries(self, session: str) -> list[Entry]:
        return await super().entries(check_session_id(session).lower())

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        return await super().create(check_session_id(session).lower(), entries)


# --- forks and compactions -------------------------------------------------------------


class ForkWholeTreeLogStore(MemoryLogStore):
    """A native ``fork`` that copies every entry of the session, abandoned branches
    included, instead of the path to the leaf.

    In the wild: ``INSERT INTO entries SELECT ... WHERE session_id = $1`` without the
    recursive walk up the parent pointers; copying the JSONL file.
    """

    async def fork(self, session: str, new_session: str, leaf: str | None) -> bool:
        return await self.create(new_session, await self.entries(session))


class CompactionPrunesLogStore(MemoryLogStore):
    """Appending a compaction deletes the entries it summarized (the path before its
    first kept entry), so branching back before it finds nothing.

    In the wild: "compaction" implemented as a truncation to save space (``DELETE ...
    WHERE created_at < $kept``), rewriting the JSONL file with the summary at the top.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        await super().append(session, entries)
        log = self.backend.logs.get(check_session_id(session), [])
        for entry in check_entries(entries):
            if isinstance(entry.payload, Compaction):
                line = [e.id for e in path(log, entry.id)]
                keep_from = entry.payload.first_kept_id
                if keep_from in line:
                    gone = set(line[: line.index(keep_from)])
                    log[:] = [e for e in log if e.id not in gone]
                    # Pruned entries' children become roots, as after a DELETE CASCADE-less delete.
                    log[:] = [replace(e, parent_id=None) if e.parent_id in gone else e for e in log]


# --- the registry ---------------------------------------------------------------------


class UnlockedIdCheckLogStore(MemoryLogStore):
    """``append`` checks the batch's ids against the log, then writes after a round
    trip, with no lock or unique constraint between: two handles appending one id at
    once both pass the check and both write it.

    In the wild: ``SELECT id ... WHERE id IN (...)`` then ``INSERT`` with no
    ``UNIQUE (session, id)``; Redis ``SISMEMBER`` then ``RPUSH`` without ``WATCH``.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        session = check_session_id(session)
        batch = check_batch(session, entries, set(self.backend.ids.get(session, ())))
        await asyncio.sleep(0)  # the round trip between the check and the write
        self.backend.logs.setdefault(session, []).extend(batch)
        self.backend.ids.setdefault(session, set()).update(e.id for e in batch)


def _replica(primary: MemoryLogStore) -> MemoryLogStore:
    return primary.replica()


class PercentDecodedIdsLogStore(MemoryLogStore):
    """Entry ids percent-decoded on their way in (the id is a URL path segment of the
    store's HTTP API, and the server decodes it): ``%41`` is entry ``A``, so a batch
    holding both is refused as a reused id, and ``%41`` comes back as ``A``.

    In the wild: entry ids in REST paths (``PUT /sessions/s/entries/{id}``) decoded by
    the framework's router; ids put in URL query strings.
    """

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        await super().append(session, [replace(e, id=unquote(e.id)) for e in entries])


class FirstPageOnlyLogStore(MemoryLogStore):
    """``entries()`` returns the first page of a paginated read only: pages end past
    1 MiB of entry text (a DynamoDB ``Query`` returns at most 1 MB, and the next page's
    ``LastEvaluatedKey`` is never followed), so a long log comes back cut.

    In the wild: a DynamoDB or Cosmos DB query that ignores the continuation token.
    """

    async def entries(self, session: str) -> list[Entry]:
        out, size = [], 0
        for entry in await super().entries(session):
            if size > 2**20:
                break
            out.append(entry)
            size += len(repr(entry.payload).encode())
        return out


def _broken(
    name: str, cls: type[MemoryLogStore], bug: str, wild: str, clause: str, diagnosis: str,
    *, replica: bool = False, racy: bool = False,
) -> BrokenStore:
    def factory() -> MemoryLogStore:
        return cls()

    factory.__name__ = factory.__qualname__ = "make_" + name.replace("-", "_")
    factory.__doc__ = cls.__doc__
    return BrokenStore(name, bug, wild, clause, diagnosis, factory,
                       replica=_replica if replica else None, racy=racy)


_ROUND_TRIP = "log_entries_round_trip_exactly"
_REFUSED = "log_bad_batches_are_refused_whole"
_FORK = "log_fork_copies_the_active_path"

BROKEN: list[BrokenStore] = [
    _broken("log-entry-ids-percent-decoded", PercentDecodedIdsLogStore, "entry ids percent-decoded on their way in",
            "entry ids in REST paths decoded by the router", "log_related_ids_stay_apart",
            "two of them are one id to the store"),
    _broken("log-reads-first-page-only", FirstPageOnlyLogStore, "entries() returns the first 1 MiB page only",
            "a DynamoDB query ignoring LastEvaluatedKey", "log_fields_round_trip_at_every_size", "lost"),
    _broken("log-times-seconds", SecondsLogStore, "creation times truncated to seconds",
            "MySQL DATETIME without (6); integer Unix timestamps", _ROUND_TRIP, "truncated to seconds"),
    _broken("log-times-milliseconds", MillisecondsLogStore, "creation times truncated to milliseconds",
            "BSON dates; JavaScript Date / toISOString (pi-mono's JSONL)", _ROUND_TRIP,
            "truncated to milliseconds"),
    _broken("log-times-naive-local", NaiveLocalTimeLogStore,
            "times stored as naive local wall time, read back as UTC",
            "Postgres timestamp (without time zone) columns; datetime.now() mixups", _ROUND_TRIP,
            "naive local time"),
    _broken("log-times-utc", UtcOffsetLogStore, "times come back in UTC, the writer's offset lost",
            "Postgres timestamptz; MongoDB dates; astimezone(UTC) before isoformat()", _ROUND_TRIP,
            "UTC offset lost"),
    _broken("log-custom-jsonb", JsonbCustomLogStore, "custom JSON re-encoded as jsonb does",
            "custom data in a jsonb / MySQL JSON column, or kept as a parsed dict", _ROUND_TRIP,
            "raw JSON re-encoded"),
    _broken("log-meta-as-message", MetaAsMessageLogStore, "meta entries stored as messages",
            "a log built on a messages table with no kind column", _ROUND_TRIP,
            "kind 'meta' came back as 'message'"),
    _broken("log-ids-reused", ReusedIdsLogStore, "a reused entry id is stored a second time",
            "no UNIQUE (session, id); JSONL appended without reading; RPUSH", _REFUSED, "stored twice"),
    _broken("log-upsert-by-id", UpsertByIdLogStore, "a reused entry id replaces the earlier entry",
            "INSERT OR REPLACE; ON CONFLICT DO UPDATE; replace_one(upsert=True); a dict by id", _REFUSED,
            "replaced the earlier entry"),
    _broken("log-orphans", OrphansLogStore, "entries whose parent is in no session are accepted",
            "a parent_id column with no check or foreign key", _REFUSED, "orphan was accepted"),
    _broken("log-one-entry-unchecked", OneEntryUncheckedLogStore, "a one-entry append skips the id and parent checks",
            "a single-row INSERT fast path beside the batch statement", _REFUSED, "was accepted"),
    _broken("log-half-written-batch", HalfWrittenBatchLogStore,
            "a bad entry is refused after the batch's earlier entries landed",
            "INSERTs in autocommit; insert_many(ordered=True); one JSONL line per write", _REFUSED,
            "partly written"),
    _broken("log-entry-by-entry", EntryByEntryLogStore,
            "a batch written one entry per command, no transaction",
            "RPUSH per entry without MULTI/EXEC; INSERTs in autocommit; unlocked JSONL writers",
            "log_batches_are_atomic", "written entry by entry", racy=True),
    _broken("log-global-ids", GlobalIdsLogStore, "entry ids unique across sessions, so a fork is refused",
            "PRIMARY KEY (id) instead of (session_id, id); one Mongo collection keyed by entry id",
            _FORK, "unique per session"),
    _broken("log-stale-snapshot", StaleSnapshotLogStore,
            "append rewrites the log from a stale snapshot: concurrent entries lost",
            "a log kept as one JSON document or blob; a JSONL file rewritten, not O_APPEND",
            "log_concurrent_appends_all_land", "entries lost", racy=True),
    _broken("log-per-handle-lock", PerHandleLockLogStore,
            "stale-snapshot append behind a lock that holds in one handle only",
            "asyncio.Lock / threading.Lock around read-modify-write on a shared backend",
            "log_appends_land_across_replicas", "entries lost", replica=True, racy=True),
    BrokenStore("log-plain-unlocked-append", "a plain store's append rewrites the log with no lock",
                "JSONL files rewritten by threaded servers; dict-of-lists stores shared by threads",
                "log_concurrent_appends_all_land", "entries lost", PlainUnlockedAppendLogStore, racy=True),
    _broken("log-racy-create", RacyCreateLogStore, "create checks the session is empty, then writes",
            "SELECT count(*) then INSERT; os.path.exists then open(path, 'w')",
            "log_racing_creates_have_one_winner", "racing creates returned True", racy=True),
    _broken("log-create-appends", CreateAppendsLogStore,
            "create never checks the session is new: a fork lands in an existing session",
            "create written as an alias of append; open(path, 'a') where 'x' was meant", _FORK,
            "fork wrote into a session that already had entries"),
    _broken("log-stale-replica-cache", StaleReplicaCacheLogStore,
            "each handle serves reads from its own cache of the log",
            "per-process read-through caches updated by the handle's own writes only",
            "log_replicas_see_each_others_appends", "stale read", replica=True),
    _broken("log-sorted-by-time", SortedByTimeLogStore, "entries read back sorted by creation time",
            "ORDER BY created_at; time-sorted keys (DynamoDB, Cassandra); merging JSONL by time",
            "log_append_order_is_kept", "sorted by creation time"),
    _broken("log-returns-own-list", OwnListLogStore, "entries() returns the store's own list",
            "`return self._logs[session]` in in-memory stores and caches", "log_append_order_is_kept",
            "own list"),
    _broken("log-session-lowercased", LowercasedSessionLogStore, "sessions keyed by the id lower-cased",
            "case-insensitive collations (MariaDB default); ids lower()-ed on the way in",
            "log_sessions_are_isolated", "differ only by case"),
    _broken("log-fork-whole-tree", ForkWholeTreeLogStore, "a native fork copies the whole tree",
            "INSERT ... SELECT WHERE session_id = $1 without the recursive walk; copying the file",
            _FORK, "copied the whole tree"),
    _broken("log-compaction-prunes", CompactionPrunesLogStore,
            "a compaction deletes the entries it summarized",
            "compaction as truncation (DELETE WHERE created_at < kept); a file rewritten from the summary",
            "log_compaction_removes_nothing", "deleted"),
    # Round 3: a race no clause tried, and stories that used to be told wrong.
    _broken("log-unlocked-id-check", UnlockedIdCheckLogStore,
            "ids checked, then written after a round trip, with no lock or unique constraint",
            "SELECT then INSERT without UNIQUE (session, id); SISMEMBER then RPUSH without WATCH",
            "log_conflicting_appends_have_one_winner", "entry id 'shared' stored", racy=True),
    _broken("log-times-milliseconds-refusing", MillisecondsLogStore,
            "creation times truncated to milliseconds (seen by the refused-batch clause)",
            "BSON dates; JavaScript Date / toISOString (pi-mono's JSONL)", _REFUSED,
            "the log came back changed, ids intact: entry 'e0': created_at truncated to milliseconds"),
    _broken("log-times-utc-compacting", UtcOffsetLogStore,
            "times come back in UTC (seen by the compaction clause)",
            "Postgres timestamptz; MongoDB dates", "log_compaction_removes_nothing",
            "after compaction: entry 'e0': UTC offset lost"),
    _broken("log-sorted-by-time-round-trip", SortedByTimeLogStore,
            "entries read back sorted by creation time (seen by the round-trip clause)",
            "ORDER BY created_at; time-sorted keys", _ROUND_TRIP, "sorted by creation time"),
]

#: The broken variants of the (async) memory log store: (name, class, the bug in one
#: line), for the direct checks in tests/test_log_stores.py.
VARIANTS: list[tuple[str, type[MemoryLogStore], str]] = list({
    type(store): (b.name, type(store), b.bug) for b in reversed(BROKEN)
    if isinstance(store := b.factory(), MemoryLogStore)
}.values())[::-1]
