"""The PostgreSQL log store: an asyncpg pool the application already has, and two tables.

The application runs :data:`SCHEMA` (idempotent); the store runs no DDL and needs only
SELECT, INSERT and UPDATE on its tables (the least-privilege rule of
:mod:`reference_stores.postgres`: grant SELECT, INSERT, UPDATE, DELETE).

How it keeps each PostgreSQL fact that breaks naive log stores, and the log contract:

- *``jsonb`` rewrites JSON*: payloads are JSON text (:mod:`reference_stores._entry_codec`)
  in a ``text`` column, the custom JSON inside it as a string value; never ``jsonb``.
- *``text`` refuses NUL*: session and entry ids may hold one, so they are ``bytea``
  (their UTF-8 bytes; compared byte for byte, no collation). Payload text holds no NUL
  (``json.dumps`` escapes it).
- *``timestamptz`` keeps the instant, not the offset* (and asyncpg cannot decode an
  instant before year 1): a creation time is two integers, microseconds since the
  epoch (``created_us``) and the UTC offset in seconds (``utc_offset``), both exact.
- *Row order is unspecified without ``ORDER BY``*: entries are read ``ORDER BY seq``,
  a per-session position assigned under a row lock, never a time.
- *An append is one statement* (:data:`_APPEND`, one round trip and one commit, as
  ``autocommit``): it looks up which of the batch's ids and outside parents the session
  has (one indexed lookup, ``UNIQUE (session, id)`` backs it), and only if none of the
  ids and all of the parents are there upserts the session's row in
  ``storetest_log_sessions`` (which locks it until commit and reserves the batch's
  positions, ``length``) and inserts the batch; it returns the ids it found, from which
  :func:`~storetest.entries.check_batch` names the refusal. (A batch holding an id
  twice is refused whatever the session holds: it only reads the ids and refuses.)
  The lookup reads the statement's snapshot, taken before the lock: a refusal is what
  the log held at that instant (ids are never removed, so it stays true), and an id
  that lands between the snapshot and the lock is caught by the unique key, which
  fails the whole statement; the store then runs it again (up to
  :data:`APPEND_ATTEMPTS` times, as it does on a serialization failure under a stricter
  isolation level), and the new snapshot refuses it by name. The upsert always locks
  and updates the newest row version, so positions never collide. A statement is
  atomic and a read one statement (one snapshot), so no reader sees half a batch. A
  create is a transaction: it inserts the session row with ``ON CONFLICT DO
  NOTHING``, so of two racing creates the second waits for the first and finds its
  row.
- *Appends must not cost O(log length)*: no step reads the log; each is a B-tree probe.
  A load decodes the rows as the store's own, as :mod:`reference_stores.sqlite_log` does.

Lost connections are handled as in :mod:`reference_stores.postgres` (whose helpers this
module uses): the error that broke the transaction reaches the caller as
:class:`~storetest.contract.StoreError`, and a connection lost after COMMIT was sent
(for an append: after its statement was sent, since it commits by itself) raises
:class:`~storetest.contract.OutcomeUnknown`; and every call is bounded by ``timeout``
seconds as the transcript store's are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, NoReturn

import asyncpg

from reference_stores._entry_codec import (
    decode_time,
    decode_trusted_payload,
    encode_payload,
    encode_time,
    gc_paused,
    trusted_entry,
)
from reference_stores.postgres import (
    _BACKEND_ERRORS,
    DEFAULT_TIMEOUT,
    _CommitLost,
    _Deadline,
    _describe,
    _fail,
    _InTransaction,
    _is_closed,
    _outcome_unknown,
    _pooled,
    _retrieve,
    _transaction,
    _unsure,
    check_timeout,
)
from storetest.contract import OutcomeUnknown, StoreError, check_session_id
from storetest.entries import Entry, check_batch, check_create, check_entries

__all__ = ["APPEND_ATTEMPTS", "SCHEMA", "PostgresLogStore"]

_log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS storetest_log_sessions (
    session  bytea  PRIMARY KEY,
    length   bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS storetest_log_entries (
    session     bytea   NOT NULL,
    seq         bigint  NOT NULL,
    id          bytea   NOT NULL,
    parent_id   bytea,
    created_us  bigint  NOT NULL,
    utc_offset  integer NOT NULL,
    kind        text    NOT NULL,
    payload     text    NOT NULL,
    PRIMARY KEY (session, seq),
    UNIQUE (session, id)
);
"""

# Locks the session row until commit and reserves $2 positions; returns the first.
_RESERVE = """
INSERT INTO storetest_log_sessions AS s (session, length) VALUES ($1, $2)
ON CONFLICT (session) DO UPDATE SET length = s.length + $2
RETURNING s.length - $2
"""
_CREATE_SESSION = """
INSERT INTO storetest_log_sessions (session, length) VALUES ($1, $2)
ON CONFLICT (session) DO NOTHING
RETURNING length
"""
_KNOWN_IDS = "SELECT id FROM storetest_log_entries WHERE session = $1 AND id = ANY($2::bytea[])"

#: How many times an append runs its statement when a racing writer's id or a
#: serialization failure made the statement fail (see the module docstring).
APPEND_ATTEMPTS = 3

# $3 the batch's ids (none twice), $4 the parents not earlier in the batch (distinct).
# Writes only if none of $3 and all of $4 are in the session, which is exactly when
# check_batch passes given what it returns: those of them the session has.
_APPEND = """
WITH known AS (
    SELECT id FROM storetest_log_entries WHERE session = $1 AND id = ANY($3::bytea[] || $4::bytea[])
), reserved AS (
    INSERT INTO storetest_log_sessions AS s (session, length)
    SELECT $1, $2
    WHERE NOT EXISTS (SELECT 1 FROM known WHERE id = ANY($3::bytea[]))
      AND (SELECT count(*) FROM known WHERE id = ANY($4::bytea[])) = cardinality($4::bytea[])
    ON CONFLICT (session) DO UPDATE SET length = s.length + $2
    RETURNING s.length - $2 AS first
), inserted AS (
    INSERT INTO storetest_log_entries (session, seq, id, parent_id, created_us, utc_offset, kind, payload)
    SELECT $1, r.first + t.n - 1, t.id, t.parent_id, t.created_us, t.utc_offset, t.kind, t.payload
    FROM reserved AS r,
        unnest($3::bytea[], $5::bytea[], $6::bigint[], $7::integer[], $8::text[], $9::text[])
        WITH ORDINALITY AS t(id, parent_id, created_us, utc_offset, kind, payload, n)
)
SELECT id FROM known
"""
# _APPEND for a batch of one entry, the common append, with scalars for arrays: $2 its
# id, $3 its parent (NULL for a root). Writes only if the session lacks $2 and has $3.
_APPEND_ONE = """
WITH known AS (
    SELECT id FROM storetest_log_entries WHERE session = $1 AND (id = $2 OR id = $3)
), reserved AS (
    INSERT INTO storetest_log_sessions AS s (session, length)
    SELECT $1, 1
    WHERE NOT EXISTS (SELECT 1 FROM known WHERE id = $2)
      AND ($3::bytea IS NULL OR EXISTS (SELECT 1 FROM known WHERE id = $3))
    ON CONFLICT (session) DO UPDATE SET length = s.length + 1
    RETURNING s.length - 1 AS first
), inserted AS (
    INSERT INTO storetest_log_entries (session, seq, id, parent_id, created_us, utc_offset, kind, payload)
    SELECT $1, r.first, $2::bytea, $3::bytea, $4::bigint, $5::integer, $6::text, $7::text FROM reserved AS r
)
SELECT id FROM known
"""
_INSERT = """
INSERT INTO storetest_log_entries (session, seq, id, parent_id, created_us, utc_offset, kind, payload)
SELECT $1, $2 + t.n - 1, t.id, t.parent_id, t.created_us, t.utc_offset, t.kind, t.payload
FROM unnest($3::bytea[], $4::bytea[], $5::bigint[], $6::integer[], $7::text[], $8::text[])
    WITH ORDINALITY AS t(id, parent_id, created_us, utc_offset, kind, payload, n)
"""
_RETRIED = (asyncpg.UniqueViolationError, asyncpg.SerializationError, asyncpg.DeadlockDetectedError)

_ROWS = """
SELECT id, parent_id, created_us, utc_offset, kind, payload
FROM storetest_log_entries WHERE session = $1 ORDER BY seq
"""


class _Found:
    """The batch's ids (and parents) that the session already has."""

    def __init__(self, ids: set[str]) -> None:
        self.ids = ids

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.ids


def _statement_unknown(operation: str, session: str, lost: _CommitLost, timeout: float) -> NoReturn:
    """:func:`~reference_stores.postgres._outcome_unknown` for a statement that commits
    by itself: what was sent is the statement, not a COMMIT."""
    cause = lost.__cause__ if lost.__cause__ is not None else lost
    what = (
        "its statement (which commits by itself) got no answer within the store's timeout"
        if isinstance(cause, TimeoutError)
        else "the connection to PostgreSQL was lost after its statement (which commits by itself) was sent"
    )
    raise OutcomeUnknown(
        f"{operation} session {session!r} may or may not have taken effect: {what} ({_describe(cause, timeout)})"
    ) from cause


async def _autocommitted(conn: Any, query: str, args: Sequence[Any], deadline: _Deadline) -> list[Any]:
    """``query``'s rows, run as a transaction of its own (the connection in no transaction,
    so the statement commits as it ends). Once it is sent, a lost connection or a
    timeout leaves its outcome unknown (:class:`_CommitLost`); a server's error on a
    live connection means it rolled back."""
    if conn.is_in_transaction():
        raise _InTransaction(
            "the connection is inside a transaction the application opened; "
            "commit or roll back before the store uses it"
        )
    left = deadline.left()  # raising here, nothing is sent
    try:
        rows: list[Any] = await conn.fetch(query, *args, timeout=left)
    except Exception as exc:
        if _is_closed(conn) or not isinstance(exc, asyncpg.PostgresError):
            raise _CommitLost(str(exc)) from exc
        raise
    return rows


class PostgresLogStore:
    """A log store keeping entry logs in PostgreSQL tables made by :data:`SCHEMA`.

    Several stores (in one process or many) on the same database are replicas.

    :param pool: an ``asyncpg`` pool (or anything with its ``acquire()``), created on
        the event loop the store will be used from. The store never closes it.
    :param timeout: seconds a call may take, all its waits together (as
        :class:`~reference_stores.postgres.PostgresStore`'s).
    :param hold_connection: ``False`` (the default): every call takes a connection from
        ``pool`` and gives it back, so the handle's calls run in parallel on as many
        connections as the pool lends, and the pool resets each connection as it comes
        back (asyncpg's ``reset``: a round trip of its own after every call). ``True``:
        the handle takes one connection from ``pool`` at its first call and keeps it
        until :meth:`aclose`, running its calls on it one at a time, in the order they
        came, with no hand-off and no reset between them (the store's statements leave
        no session state behind: no ``SET``, advisory lock, ``LISTEN`` or open cursor).
        See "Holding a connection" in ``docs/log-stores.md`` for what that means for the
        pool and for connection faults.
    :raises ValueError: ``timeout`` is not positive.
    :raises TypeError: ``hold_connection`` is not a bool.

    Methods raise ``TypeError``/``ValueError`` for bad arguments (``ValueError`` for a
    batch :func:`~storetest.entries.check_batch` refuses, with nothing written), and
    :class:`~storetest.contract.StoreError` or its subclass
    :class:`~storetest.contract.OutcomeUnknown` as the transcript store does. With
    ``hold_connection=True``: a call that finds its connection lost or left in an
    unknown state raises what it would raise with a pool, and the connection is closed
    and given back to the pool; the handle's next call takes a new one (so does a call
    that finds its connection closed before sending anything). A call after
    :meth:`aclose` raises ``StoreError``.
    """

    def __init__(self, pool: Any, *, timeout: float = DEFAULT_TIMEOUT, hold_connection: bool = False) -> None:
        if not isinstance(hold_connection, bool):
            raise TypeError(f"hold_connection must be a bool, not {type(hold_connection).__name__}")
        self._pool = pool
        self._timeout = check_timeout(timeout)
        self._held: _Held | None = _Held(pool) if hold_connection else None

    def __repr__(self) -> str:
        held = ", hold_connection=True" if self._held is not None else ""
        return f"PostgresLogStore({self._pool!r}{held})"

    async def __aenter__(self) -> PostgresLogStore:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Give a held connection back to the pool (which resets it then), after the
        calls under way; later calls raise ``StoreError``. Harmless twice; does nothing
        without ``hold_connection``."""
        if self._held is not None:
            await self._held.close(self._timeout)

    def _connection(self, operation: str, session: str, deadline: _Deadline) -> AbstractAsyncContextManager[Any]:
        if self._held is not None:
            return self._held.use(operation, session, deadline)
        return _pooled(self._pool, operation, session, deadline)

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        """Append a batch in one transaction, creating the session if new.

        :raises ValueError: a duplicate id or an unknown parent (nothing written).
        """
        session = check_session_id(session)
        batch = check_entries(entries)
        if not batch:
            return
        key = session.encode("utf-8")
        if len(batch) == 1:
            (e,) = batch
            us, offset = encode_time(e.created_at)
            one = (key, e.id.encode("utf-8"), None if e.parent_id is None else e.parent_id.encode("utf-8"),
                   us, offset, e.kind, encode_payload(e))
            await self._append(session, batch, _APPEND_ONE, one)
            return
        # The parents the session must have: those not earlier in the batch.
        earlier: set[str] = set()
        needed: set[str] = set()
        for e in batch:
            if e.parent_id is not None and e.parent_id not in earlier:
                needed.add(e.parent_id)
            earlier.add(e.id)
        times = [encode_time(e.created_at) for e in batch]
        args = (
            key, len(batch), [e.id.encode("utf-8") for e in batch], [p.encode("utf-8") for p in sorted(needed)],
            [None if e.parent_id is None else e.parent_id.encode("utf-8") for e in batch],
            [us for us, _ in times], [offset for _, offset in times],
            [e.kind for e in batch], [encode_payload(e) for e in batch],
        )
        if len(earlier) < len(batch):
            # An id twice in the batch: refused whatever the session holds, by the check
            # that names the first fault given what the session holds.
            await self._append(session, batch, _KNOWN_IDS, (key, args[2] + args[3]), twice=True)
        await self._append(session, batch, _APPEND, args)

    async def _append(self, session: str, batch: Sequence[Entry], query: str, args: Sequence[Any],
                      *, twice: bool = False) -> None:
        deadline = _Deadline(self._timeout)
        try:
            async with self._connection("append to", session, deadline) as conn:
                if twice:
                    rows = await conn.fetch(query, *args, timeout=deadline.left())
                    check_batch(session, batch, _Found({r["id"].decode("utf-8") for r in rows}))
                    raise AssertionError("check_batch passed a batch holding an id twice")
                for attempt in range(1, APPEND_ATTEMPTS + 1):
                    try:
                        rows = await _autocommitted(conn, query, args, deadline)
                    except _RETRIED:
                        if attempt == APPEND_ATTEMPTS:
                            raise
                        continue
                    check_batch(session, batch, _Found({r["id"].decode("utf-8") for r in rows}))
                    return
        except _CommitLost as exc:
            _statement_unknown("append to", session, exc, self._timeout)
        except _BACKEND_ERRORS as exc:
            _fail("append to", session, exc, self._timeout)

    async def entries(self, session: str) -> list[Entry]:
        """Every entry in append order; ``[]`` for a session never used."""
        session = check_session_id(session)
        deadline = _Deadline(self._timeout)
        try:
            async with self._connection("read of", session, deadline) as conn:
                rows = await conn.fetch(_ROWS, session.encode("utf-8"), timeout=deadline.left())
        except _BACKEND_ERRORS as exc:
            _fail("read of", session, exc, self._timeout)
        try:
            # The rows are this store's own, written from checked entries: decoded
            # trusted, with the collector paused (see reference_stores._entry_codec).
            with gc_paused():
                return [
                    trusted_entry(id_.decode("utf-8"), None if parent is None else parent.decode("utf-8"),
                                  decode_time(us, offset), kind, decode_trusted_payload(kind, payload))
                    for id_, parent, us, offset, kind, payload in rows
                ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"read of session {session!r} failed: a stored entry is corrupt ({exc})") from exc

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        """Append a non-empty batch only if the session has no entries.

        :returns: ``True`` if written, ``False`` if the session already had entries.
        """
        session = check_session_id(session)
        batch = check_create(session, entries)
        key = session.encode("utf-8")
        deadline = _Deadline(self._timeout)
        try:
            async with self._connection("create of", session, deadline) as conn, _transaction(conn, deadline):
                if await conn.fetchval(_CREATE_SESSION, key, len(batch), timeout=deadline.left()) is None:
                    # The row exists: lock it; a row with no entries (none is left
                    # behind today) still counts as a session to create.
                    first = await conn.fetchval(_RESERVE, key, len(batch), timeout=deadline.left())
                    if first:
                        raise _Exists
                else:
                    first = 0
                await self._insert(conn, key, first, batch, deadline)
        except _Exists:
            return False
        except _CommitLost as exc:
            _outcome_unknown("create of", session, exc, self._timeout)
        except _BACKEND_ERRORS as exc:
            _fail("create of", session, exc, self._timeout)
        return True

    @staticmethod
    async def _insert(conn: Any, key: bytes, first: int, batch: Sequence[Entry], deadline: _Deadline) -> None:
        times = [encode_time(e.created_at) for e in batch]
        await conn.execute(
            _INSERT, key, first,
            [e.id.encode("utf-8") for e in batch],
            [None if e.parent_id is None else e.parent_id.encode("utf-8") for e in batch],
            [us for us, _ in times], [offset for _, offset in times],
            [e.kind for e in batch], [encode_payload(e) for e in batch],
            timeout=deadline.left(),
        )


class _Exists(Exception):
    """The session has entries: roll the create back (it reserved positions) and say so."""


class _Held:
    """The one connection of a handle made with ``hold_connection=True``: taken from the
    pool at the first call, used by one call at a time, replaced after a fault."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._conn: Any = None
        self._lock: asyncio.Lock | None = None  # made on the loop that first uses it
        self._closed = False

    def _the_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @asynccontextmanager
    async def use(self, operation: str, session: str, deadline: _Deadline) -> AsyncIterator[Any]:
        lock = self._the_lock()
        try:
            async with asyncio.timeout(deadline.left()):
                await lock.acquire()
        except TimeoutError as exc:
            raise TimeoutError(
                "the handle's connection was busy with its other calls for the whole of the "
                f"store's timeout of {deadline.seconds:g} s"
            ) from exc
        try:
            if self._closed:
                raise _Closed(f"{operation} session {session!r} failed: the store was closed (aclose)")
            conn = self._conn
            if conn is None or _is_closed(conn):
                if conn is not None:
                    # Lost between calls, nothing sent on it: give it back, take another.
                    self._conn = None
                    await self._give_back(conn, deadline.for_release(), failed=True)
                try:
                    conn = await self._pool.acquire(timeout=deadline.left())
                except TimeoutError as exc:
                    raise TimeoutError(
                        f"no connection from the pool within the store's timeout of {deadline.seconds:g} s"
                    ) from exc
                self._conn = conn
            try:
                yield conn
            except BaseException as exc:
                if _unsure(exc) or _is_closed(conn):
                    # Its state is unknown, or it is gone: close it and give it back; the
                    # next call takes a new one.
                    self._conn = None
                    if not _is_closed(conn):
                        conn.terminate()
                    await self._give_back(conn, deadline.for_release(), failed=True)
                raise
        finally:
            lock.release()

    async def _give_back(self, conn: Any, timeout: float, *, failed: bool) -> None:
        # Shielded, as in _pooled: a release past the bound finishes in the background.
        release = asyncio.ensure_future(self._pool.release(conn, timeout=timeout))
        release.add_done_callback(_retrieve)
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(release)
        except Exception:
            _log.log(logging.DEBUG if failed else logging.WARNING,
                     "giving a held connection back to the pool failed; the pool closes it", exc_info=True)

    async def close(self, timeout: float) -> None:
        async with self._the_lock():  # after the calls under way
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                await self._give_back(conn, timeout, failed=_is_closed(conn))


class _Closed(StoreError):
    """A call on a handle after :meth:`PostgresLogStore.aclose`."""
