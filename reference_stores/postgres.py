"""The PostgreSQL store: an asyncpg pool the application already has, and three tables.

The application runs :data:`SCHEMA` (it is idempotent: run it twice, nothing changes);
the store runs no DDL and needs only SELECT, INSERT, UPDATE and DELETE on its tables
(the steer ids come from an identity column, which needs no grant on its sequence).

How it keeps each PostgreSQL fact in the design brief:

- ``jsonb`` rewrites JSON: messages are stored as :func:`storetest.codec.encode_message`
  text in a ``text`` column, one row per message, never ``jsonb``. The codec escapes
  NUL, so that text is always acceptable.
- ``text`` refuses NUL: session ids and steer texts may hold one, so both are stored as
  ``bytea`` (their UTF-8 bytes). That also makes session ids compare byte for byte,
  with no collation to fold case, accents or trailing spaces.
- Row order and ``RETURNING`` order are unspecified: every read says ``ORDER BY``, and
  a take returns its deleted rows through ``WITH d AS (DELETE ... RETURNING ...)
  SELECT ... ORDER BY id``.
- READ COMMITTED pitfalls: a take locks the session's row in ``storetest_sessions``
  (``FOR UPDATE``) and only then deletes, in a second statement whose fresh snapshot
  sees everything the previous lock holder committed; so takes on one session run one
  at a time and each removes every steer queued when it ran. No ``SKIP LOCKED``, no
  ``LIMIT 1`` subquery. ``add_steer`` holds ``FOR KEY SHARE`` on the same row while it
  inserts, so a take waits for adds already under way: it never returns a newer
  steer while an older one is still uncommitted (ids come from one identity column,
  handed out in time order).
- Torn transcripts: a save is one transaction that first locks (and bumps the version
  of) the session row, so concurrent saves queue up and each leaves a whole transcript;
  a read is one statement, hence one snapshot, so it sees a whole transcript too.

Lost connections: every operation is one transaction, begun, committed and rolled
back by the store itself, so the error that reaches the caller is the one that broke
the transaction ("terminating connection due to administrator command"), never the
failure of a rollback or of the release to the pool that followed it (those are
logged). A connection lost after COMMIT was sent raises
:class:`~storetest.contract.OutcomeUnknown` (a take's carries the steers it read); a
COMMIT that returned is a success even if giving the connection back then fails.

Saves write only what changed. Agents save the whole growing transcript before every
model request; rewriting it each time costs O(turns) per save. Each handle remembers,
per session, the version it last wrote or read, the messages at that version, and a
digest of each stored row. A save bumps the version under the row lock: if the
version it replaced is the remembered one, the unchanged prefix is found by comparing
message objects in memory (identity first) and only the tail is deleted and inserted.
Otherwise (another handle wrote in between, or nothing is remembered) it reads the
stored digests, ordered by position, and compares those: still no decoding.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import asyncpg

from storetest.codec import decode_message, encode_message
from storetest.contract import (
    Message,
    OutcomeUnknown,
    StoreError,
    check_messages,
    check_session_id,
    check_steer_text,
)

__all__ = ["SCHEMA", "PostgresStore"]

_log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS storetest_sessions (
    session  bytea  PRIMARY KEY,
    version  bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS storetest_messages (
    session   bytea   NOT NULL,
    position  integer NOT NULL,
    digest    bytea   NOT NULL,
    body      text    NOT NULL,
    PRIMARY KEY (session, position)
);
CREATE TABLE IF NOT EXISTS storetest_steers (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session  bytea  NOT NULL,
    text     bytea  NOT NULL
);
CREATE INDEX IF NOT EXISTS storetest_steers_session ON storetest_steers (session, id);
"""

# The version a save replaced is the one it returns minus one; a session with no row
# yet is version 0, with no messages.
_BUMP_VERSION = """
INSERT INTO storetest_sessions AS s (session, version) VALUES ($1, 1)
ON CONFLICT (session) DO UPDATE SET version = s.version + 1
RETURNING s.version
"""
_READ_DIGESTS = """
SELECT digest FROM storetest_messages WHERE session = $1 ORDER BY position
"""
_DELETE_FROM = "DELETE FROM storetest_messages WHERE session = $1 AND position >= $2"
_INSERT_TAIL = """
INSERT INTO storetest_messages (session, position, digest, body)
SELECT $1, t.position, t.digest, t.body
FROM unnest($2::integer[], $3::bytea[], $4::text[]) AS t(position, digest, body)
"""
# One statement, so the version and the rows come from one snapshot. A session row
# without messages yields one row of NULLs; no session row yields nothing.
_READ_TRANSCRIPT = """
SELECT s.version, m.digest, m.body
FROM storetest_sessions s
LEFT JOIN storetest_messages m ON m.session = s.session
WHERE s.session = $1
ORDER BY m.position
"""
_ENSURE_SESSION = """
INSERT INTO storetest_sessions (session, version) VALUES ($1, 0)
ON CONFLICT (session) DO NOTHING
"""
_SHARE_SESSION = "SELECT 1 FROM storetest_sessions WHERE session = $1 FOR KEY SHARE"
_LOCK_SESSION = "SELECT 1 FROM storetest_sessions WHERE session = $1 FOR UPDATE"
_INSERT_STEER = "INSERT INTO storetest_steers (session, text) VALUES ($1, $2)"
_ANY_STEER = "SELECT EXISTS (SELECT 1 FROM storetest_steers WHERE session = $1)"
_TAKE_STEERS = """
WITH d AS (DELETE FROM storetest_steers WHERE session = $1 RETURNING id, text)
SELECT text FROM d ORDER BY id
"""

# asyncpg and the OS raise these when the pool, the connection or the server fails.
# InternalClientError is what asyncpg raises when a connection dies mid-protocol
# ("cannot switch to state 15; another operation (2) is in progress").
_BACKEND_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)


class _CommitLost(Exception):
    """COMMIT was sent and the connection was lost before its answer came back."""


@dataclass(frozen=True, slots=True)
class _Known:
    """What a handle knows a session held at one version: its messages and the digest
    of each stored row, position by position."""

    version: int
    messages: tuple[Message, ...]
    digests: tuple[bytes, ...]


def _digest(body: str) -> bytes:
    return hashlib.blake2b(body.encode("utf-8"), digest_size=16).digest()


def _common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    n = min(len(old), len(new))
    # The usual save only appends: one tuple comparison in C (identity first) settles it.
    if tuple(old[:n]) == tuple(new[:n]):
        return n
    i = 0
    # Agents pass back the very objects they saved last time, so `is` settles most.
    while i < n and (old[i] is new[i] or old[i] == new[i]):
        i += 1
    return i


class PostgresStore:
    """A store keeping transcripts and steers in PostgreSQL tables made by :data:`SCHEMA`.

    Several stores (in one process or many) on the same database are replicas of one
    another. Each store remembers recent sessions, to write only what a save changed;
    that memory is only a shortcut and is checked against the stored version.

    :param pool: an ``asyncpg`` pool (or anything with its ``acquire()``), created on
        the event loop the store will be used from. The store never closes it.
    :param remember: how many sessions to remember for incremental saves (least
        recently used are forgotten first); ``0`` disables it.
    :raises ValueError: ``remember`` is negative.

    Every method raises ``TypeError``/``ValueError`` for bad arguments before touching
    the database, and :class:`~storetest.contract.StoreError` (from the driver's error)
    when the database fails, which has then changed nothing; or its subclass
    :class:`~storetest.contract.OutcomeUnknown` when the connection was lost after
    COMMIT was sent.
    """

    def __init__(self, pool: Any, *, remember: int = 1024) -> None:
        if remember < 0:
            raise ValueError(f"remember must be 0 or more, not {remember}")
        self._pool = pool
        self._remember = remember
        self._known: OrderedDict[bytes, _Known] = OrderedDict()

    def __repr__(self) -> str:
        return f"PostgresStore({self._pool!r})"

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        """Make the session's transcript exactly ``messages``, in one transaction."""
        session = check_session_id(session)
        new = check_messages(messages)
        key = session.encode("utf-8")
        try:
            async with self._connection("save to", session) as conn, _transaction(conn):
                # Locks the session row until commit: concurrent saves queue here.
                version = await conn.fetchval(_BUMP_VERSION, key)
                known = self._known.get(key)
                if known is not None and known.version == version - 1:
                    keep = _common_prefix(known.messages, new)
                    stored = len(known.digests)
                    bodies = [encode_message(m) for m in new[keep:]]
                    digests = known.digests[:keep] + tuple(_digest(b) for b in bodies)
                else:
                    rows = await conn.fetch(_READ_DIGESTS, key)
                    all_bodies = [encode_message(m) for m in new]
                    digests = tuple(_digest(b) for b in all_bodies)
                    keep = _common_prefix([bytes(r["digest"]) for r in rows], digests)
                    stored = len(rows)
                    bodies = all_bodies[keep:]
                if keep < stored:
                    await conn.execute(_DELETE_FROM, key, keep)
                if bodies:
                    await conn.execute(
                        _INSERT_TAIL,
                        key,
                        list(range(keep, len(new))),
                        list(digests[keep:]),
                        bodies,
                    )
        except BaseException as exc:
            # The transaction rolled back, or may have: what we remember may be stale.
            self._known.pop(key, None)
            if isinstance(exc, _CommitLost):
                _outcome_unknown("save to", session, exc)
            if isinstance(exc, _BACKEND_ERRORS):
                _fail("save to", session, exc)
            raise
        self._learn(key, _Known(version, new, digests))

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript in the order saved; ``[]`` for an unused session."""
        session = check_session_id(session)
        key = session.encode("utf-8")
        try:
            async with self._connection("read of", session) as conn:
                rows = await conn.fetch(_READ_TRANSCRIPT, key)
        except _BACKEND_ERRORS as exc:
            _fail("read of", session, exc)
        if not rows:
            self._learn(key, _Known(0, (), ()))
            return []
        version = rows[0]["version"]
        stored = [r for r in rows if r["body"] is not None]
        result = [decode_message(r["body"]) for r in stored]
        self._learn(key, _Known(version, tuple(result), tuple(bytes(r["digest"]) for r in stored)))
        return result

    async def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session."""
        session = check_session_id(session)
        data = check_steer_text(text).encode("utf-8")
        key = session.encode("utf-8")
        try:
            async with self._connection("add_steer to", session) as conn, _transaction(conn):
                await conn.execute(_ENSURE_SESSION, key)
                # Held until commit, so a take waits for this insert to land.
                await conn.execute(_SHARE_SESSION, key)
                await conn.execute(_INSERT_STEER, key, data)
        except _CommitLost as exc:
            _outcome_unknown("add_steer to", session, exc)
        except _BACKEND_ERRORS as exc:
            _fail("add_steer to", session, exc)

    async def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none."""
        session = check_session_id(session)
        key = session.encode("utf-8")
        rows: list[Any] = []
        try:
            async with self._connection("take_steers from", session) as conn:
                # Most takes find nothing; seeing an empty queue in one snapshot is
                # already a correct answer, with no lock and no transaction.
                if not await conn.fetchval(_ANY_STEER, key):
                    return []
                async with _transaction(conn):
                    if await conn.fetchval(_LOCK_SESSION, key) is None:
                        return []
                    rows = await conn.fetch(_TAKE_STEERS, key)
        except _CommitLost as exc:
            _outcome_unknown("take_steers from", session, exc, steers=_steers(rows))
        except _BACKEND_ERRORS as exc:
            _fail("take_steers from", session, exc)
        return _steers(rows)

    @asynccontextmanager
    async def _connection(self, operation: str, session: str) -> AsyncIterator[Any]:
        """A connection from the pool, given back afterwards. A release that fails is
        logged, never raised: after a commit the work is done, and after a failure
        the caller needs the error that caused it."""
        acquired = self._pool.acquire()
        conn = await acquired.__aenter__()
        failed = True
        try:
            yield conn
            failed = False
        finally:
            try:
                await acquired.__aexit__(None, None, None)
            except Exception:
                # After a failure the connection is usually dead and the pool's reset
                # fails too: expected, so only worth a debug line.
                _log.log(
                    logging.DEBUG if failed else logging.WARNING,
                    "giving back the connection after %s session %r failed",
                    operation,
                    session,
                    exc_info=True,
                )

    def _learn(self, key: bytes, known: _Known) -> None:
        if self._remember == 0:
            return
        current = self._known.get(key)
        # Never step back: a slow read finishing after a save knows an older version.
        if current is not None and current.version >= known.version:
            self._known.move_to_end(key)
            return
        self._known[key] = known
        self._known.move_to_end(key)
        while len(self._known) > self._remember:
            self._known.popitem(last=False)


@asynccontextmanager
async def _transaction(conn: Any) -> AsyncIterator[None]:
    """One transaction: rolled back if the block raises (a failing rollback is logged,
    the block's error is what propagates), committed if it does not. Raises
    :class:`_CommitLost` when the connection is lost once COMMIT was sent."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        yield
    except BaseException:
        try:
            await transaction.rollback()
        except Exception:
            # The connection is gone, and the server rolls back on disconnect.
            _log.debug("rollback failed", exc_info=True)
        raise
    # A connection already closed never sent COMMIT: the server rolled back.
    sent = not _is_closed(conn)
    try:
        await transaction.commit()
    except Exception as exc:
        # The server answering with an error on a live connection is a refusal (the
        # transaction rolled back); anything else leaves the outcome unknown.
        if sent and (_is_closed(conn) or not isinstance(exc, asyncpg.PostgresError)):
            raise _CommitLost(str(exc)) from exc
        raise


def _is_closed(conn: Any) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        # A pool's connection proxy, already handed back because the connection died.
        return True


def _steers(rows: list[Any]) -> list[str]:
    return [bytes(r["text"]).decode("utf-8") for r in rows]


def _fail(operation: str, session: str, exc: BaseException) -> NoReturn:
    raise StoreError(f"{operation} session {session!r} failed: {_describe(exc)}") from exc


def _outcome_unknown(
    operation: str, session: str, lost: _CommitLost, *, steers: list[str] | None = None
) -> NoReturn:
    cause = lost.__cause__ if lost.__cause__ is not None else lost
    raise OutcomeUnknown(
        f"{operation} session {session!r} may or may not have taken effect: the connection "
        f"to PostgreSQL was lost after COMMIT was sent ({_describe(cause)})",
        steers=steers or (),
    ) from cause


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, asyncpg.InterfaceError) and "pool is closed" in text:
        return "the pool is closed"
    if isinstance(exc, (asyncpg.ConnectionDoesNotExistError, ConnectionError)) or (
        isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in text
    ):
        return f"the connection to PostgreSQL was lost ({text or type(exc).__name__})"
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        return f"the connection to PostgreSQL broke mid-protocol ({text})"
    return text or type(exc).__name__
