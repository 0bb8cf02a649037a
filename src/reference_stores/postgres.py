"""The PostgreSQL store: an asyncpg pool the application already has, and three tables.

The application runs :data:`SCHEMA` (it is idempotent: run it twice, nothing changes);
the store runs no DDL and needs only SELECT, INSERT, UPDATE and DELETE on its tables
(the steer ids come from an identity column, which needs no grant on its sequence).

How it keeps each PostgreSQL fact that breaks naive stores:

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

Round trips, as ``tests/test_postgres_store.py`` counts them on the wire once each
statement has been used on the connection (asyncpg prepares a statement on its first
use there, one more round trip): a take that finds the queue empty is one, an
``EXISTS`` probe, with no lock and no transaction. A take that finds steers is four:
the probe; ``BEGIN`` and the row lock, sent as one simple-protocol message (the session
id goes in as a hex literal, since that protocol takes no parameters); the ``DELETE ...
RETURNING``; ``COMMIT``. An add is three: ``BEGIN`` with the session row's creation and
its share lock; the ``INSERT``; ``COMMIT``. The DELETE cannot share the lock's statement
(one statement reads one snapshot, taken before the lock is granted: it would miss an
older steer whose add was under way and take a newer one), nor its message (asyncpg's
simple protocol drops the rows a query returns), nor COMMIT's (the server would commit
before the rows reached the store, and a connection lost then would lose the steers).

Lost connections: every operation is one transaction, begun, committed and rolled
back by the store itself, so the error that reaches the caller is the one that broke
the transaction ("terminating connection due to administrator command"), never the
failure of a rollback or of the release to the pool that followed it (those are
logged). A connection lost after COMMIT was sent raises
:class:`~storetest.contract.OutcomeUnknown` (a take's carries the steers it read); a
COMMIT that returned is a success even if giving the connection back then fails.

Stalled connections: every call has one bound, ``timeout`` seconds (30 by default),
shared by the wait for a pool connection, every statement and COMMIT (each gets what is
left of it, through asyncpg's ``acquire(timeout=)`` and per-statement ``timeout=``), so a
network that forwards nothing ends the call with :class:`~storetest.contract.StoreError`
(or :class:`~storetest.contract.OutcomeUnknown` if it was COMMIT that got no answer)
once the bound runs out, never after the stall's length. A connection whose statement
timed out (or whose call was cancelled) is closed at once, not rolled back: asyncpg
would first wait for its cancel request to get through the same stalled network, for
``command_timeout`` seconds or forever, which is why such a call used to take twice its
bound. The server rolls back on disconnect, and the pool opens a new connection when
next needed. Giving the connection back gets what is left of the bound, and at least
half a second, so a call ends within ``timeout`` plus half a second.

Saves write only what changed, through :mod:`reference_stores._incremental`: the
session row's ``version`` is raised by every save under the row lock, each message row
carries a chain digest, and each handle remembers recent sessions, so that a save finds
the unchanged prefix in work proportional to the change, whether this handle or another
wrote last, and never decodes a stored message to do so.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, NoReturn

import asyncpg

from reference_stores._incremental import DEFAULT_CACHE_SESSIONS, Remembered, encoded
from storetest.codec import CodecError, decode_trusted
from storetest.contract import (
    Message,
    OutcomeUnknown,
    StoreError,
    check_session_id,
    check_steer_text,
)

__all__ = ["DEFAULT_TIMEOUT", "SCHEMA", "PostgresStore"]

_log = logging.getLogger(__name__)

#: Seconds a call may take, waiting for a connection, statements and COMMIT together.
DEFAULT_TIMEOUT: Final = 30.0
# Giving a connection back after the work is done gets at least this much.
_RELEASE_AT_LEAST: Final = 0.5

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
SELECT position, digest FROM storetest_messages WHERE session = $1 AND position >= $2
ORDER BY position
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
# Statements sent right after BEGIN, in the same simple-protocol message (one round
# trip; see _transaction). A simple query takes no parameters: {key} is the session's
# bytes as a hex literal (_literal), nothing a caller's text can break out of.
# Creates the session's row or finds it, then holds FOR KEY SHARE on it until commit.
_ENSURE_AND_SHARE_SESSION = """
INSERT INTO storetest_sessions (session, version) VALUES ({key}, 0) ON CONFLICT (session) DO NOTHING;
SELECT 1 FROM storetest_sessions WHERE session = {key} FOR KEY SHARE
"""
_LOCK_SESSION = "SELECT 1 FROM storetest_sessions WHERE session = {key} FOR UPDATE"
_INSERT_STEER = "INSERT INTO storetest_steers (session, text) VALUES ($1, $2)"
_ANY_STEER = "SELECT EXISTS (SELECT 1 FROM storetest_steers WHERE session = $1)"
_TAKE_STEERS = """
WITH d AS (DELETE FROM storetest_steers WHERE session = $1 RETURNING id, text)
SELECT text FROM d ORDER BY id
"""


class _CommitLost(Exception):
    """COMMIT was sent and the connection was lost before its answer came back."""


class _InTransaction(Exception):
    """The connection was inside a transaction before the store began its own."""


class _Deadline:
    """One call's bound: what is left of it for each wait the call makes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises ``TimeoutError`` (before anything is sent) once none are."""
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the store's timeout of {self.seconds:g} s ran out")
        return left

    def for_release(self) -> float:
        return max(self._end - time.monotonic(), _RELEASE_AT_LEAST)


def check_timeout(timeout: float) -> float:
    """``timeout`` as a float, or ``ValueError``/``TypeError`` if it is not a positive
    number of seconds."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive, finite number of seconds, not {timeout!r}")
    return float(timeout)


# asyncpg and the OS raise these when the pool, the connection or the server fails.
# InternalClientError is what asyncpg raises when a connection dies mid-protocol
# ("cannot switch to state 15; another operation (2) is in progress").
_BACKEND_ERRORS = (
    _InTransaction,  # not asyncpg's, but a refusal the caller sees the same way
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)


class PostgresStore:
    """A store keeping transcripts and steers in PostgreSQL tables made by :data:`SCHEMA`.

    Several stores (in one process or many) on the same database are replicas of one
    another. Each store remembers recent sessions, to write only what a save changed;
    that memory is only a shortcut and is checked against the stored version.

    :param pool: an ``asyncpg`` pool (or anything with its ``acquire()``), created on
        the event loop the store will be used from. The store never closes it.
    :param cache_sessions: how many sessions to remember for incremental saves (least
        recently used are forgotten first); ``0`` disables it.
    :param timeout: seconds a call may take, all its waits together: for a connection
        from the pool, for each statement and for COMMIT (see the module docstring).
    :raises ValueError: ``cache_sessions`` is negative, or ``timeout`` not positive.

    Every method raises ``TypeError``/``ValueError`` for bad arguments before touching
    the database, and :class:`~storetest.contract.StoreError` (from the driver's error)
    when the database fails, which has then changed nothing; or its subclass
    :class:`~storetest.contract.OutcomeUnknown` when the connection was lost after
    COMMIT was sent; both also when the call's ``timeout`` runs out (``OutcomeUnknown``
    if it ran out waiting for COMMIT's answer).
    """

    def __init__(
        self, pool: Any, *, cache_sessions: int = DEFAULT_CACHE_SESSIONS, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self._remembered = Remembered(cache_sessions)
        self._timeout = check_timeout(timeout)
        self._pool = pool

    def __repr__(self) -> str:
        return f"PostgresStore({self._pool!r})"

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        """Make the session's transcript exactly ``messages``, in one transaction."""
        session = check_session_id(session)
        key = session.encode("utf-8")
        plan = self._remembered.prepare(key, messages)
        deadline = _Deadline(self._timeout)
        try:
            async with self._connection("save to", session, deadline) as conn, _transaction(conn, deadline):
                # Locks the session row until commit: concurrent saves queue here.
                version = await conn.fetchval(_BUMP_VERSION, key, timeout=deadline.left())
                plan.start(version - 1)
                while plan.fetch_from is not None:
                    plan.resolve(await conn.fetch(_READ_DIGESTS, key, plan.fetch_from, timeout=deadline.left()))
                if plan.delete:
                    await conn.execute(_DELETE_FROM, key, plan.keep, timeout=deadline.left())
                if plan.rows:
                    positions, digests, texts = zip(*plan.rows, strict=True)
                    bodies = [encoded(plan.new[p], text) for p, text in zip(positions, texts, strict=True)]
                    await conn.execute(_INSERT_TAIL, key, positions, digests, bodies, timeout=deadline.left())
        except BaseException as exc:
            # The transaction rolled back, or may have: what we remember may be stale.
            self._remembered.forget(key)
            if isinstance(exc, _CommitLost):
                _outcome_unknown("save to", session, exc, self._timeout)
            if isinstance(exc, _BACKEND_ERRORS):
                _fail("save to", session, exc, self._timeout)
            raise
        self._remembered.learn(key, plan.known(version))

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript in the order saved; ``[]`` for an unused session."""
        session = check_session_id(session)
        key = session.encode("utf-8")
        deadline = _Deadline(self._timeout)
        try:
            async with self._connection("read of", session, deadline) as conn:
                rows = await conn.fetch(_READ_TRANSCRIPT, key, timeout=deadline.left())
        except _BACKEND_ERRORS as exc:
            _fail("read of", session, exc, self._timeout)
        if not rows:
            return []
        stored = [r for r in rows if r["body"] is not None]
        try:
            # The store wrote these rows with encode_message: the trusted decoder skips
            # value checks they cannot fail.
            result = [decode_trusted(r["body"]) for r in stored]
        except CodecError as exc:
            raise StoreError(f"read of session {session!r} failed: {exc}") from exc
        if self._remembered.wants_read(key, rows[0]["version"], len(result)):
            self._remembered.learn_read(key, rows[0]["version"], list(result), (r["digest"] for r in stored))
        return result

    async def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session."""
        session = check_session_id(session)
        data = check_steer_text(text).encode("utf-8")
        key = session.encode("utf-8")
        deadline = _Deadline(self._timeout)
        try:
            # The share lock is held until commit, so a take waits for this insert to land.
            opening = _ENSURE_AND_SHARE_SESSION.format(key=_literal(key))
            async with (
                self._connection("add_steer to", session, deadline) as conn,
                _transaction(conn, deadline, opening),
            ):
                await conn.execute(_INSERT_STEER, key, data, timeout=deadline.left())
        except _CommitLost as exc:
            _outcome_unknown("add_steer to", session, exc, self._timeout)
        except _BACKEND_ERRORS as exc:
            _fail("add_steer to", session, exc, self._timeout)

    async def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none."""
        session = check_session_id(session)
        key = session.encode("utf-8")
        rows: list[Any] = []
        deadline = _Deadline(self._timeout)
        try:
            async with self._connection("take_steers from", session, deadline) as conn:
                # Most takes find nothing; seeing an empty queue in one snapshot is
                # already a correct answer, with no lock and no transaction.
                if not await conn.fetchval(_ANY_STEER, key, timeout=deadline.left()):
                    return []
                # The lock comes with BEGIN, in one round trip; the DELETE is a statement
                # of its own, whose snapshot is taken once the lock is held. The rows are
                # in hand before COMMIT is sent.
                lock = _LOCK_SESSION.format(key=_literal(key))
                async with _transaction(conn, deadline, lock) as locked:
                    if locked != "SELECT 1":
                        return []
                    rows = await conn.fetch(_TAKE_STEERS, key, timeout=deadline.left())
        except _CommitLost as exc:
            _outcome_unknown("take_steers from", session, exc, self._timeout, steers=_steers(rows))
        except _BACKEND_ERRORS as exc:
            _fail("take_steers from", session, exc, self._timeout)
        return _steers(rows)

    def _connection(self, operation: str, session: str, deadline: _Deadline) -> AbstractAsyncContextManager[Any]:
        return _pooled(self._pool, operation, session, deadline)


@asynccontextmanager
async def _pooled(pool: Any, operation: str, session: str, deadline: _Deadline) -> AsyncIterator[Any]:
    """A connection from ``pool`` within the deadline, given back afterwards. A
    connection left in an unknown state (a statement timed out, the call was cancelled,
    the protocol broke) is closed first. A release that fails is logged, never raised:
    after a commit the work is done, and after a failure the caller needs the error
    that caused it."""
    acquired = pool.acquire(timeout=deadline.left())
    try:
        conn = await acquired.__aenter__()
    except TimeoutError as exc:
        raise TimeoutError(f"no connection from the pool within the store's timeout of {deadline.seconds:g} s") from exc
    failed = True
    try:
        yield conn
        failed = False
    except BaseException as exc:
        if _unsure(exc) and not _is_closed(conn):
            conn.terminate()
        raise
    finally:
        # Shielded, so that a release past the bound finishes (or gives up and closes
        # the connection) in the background instead of being cut off mid-way.
        release = asyncio.ensure_future(acquired.__aexit__(None, None, None))
        release.add_done_callback(_retrieve)
        try:
            async with asyncio.timeout(deadline.for_release()):
                await asyncio.shield(release)
        except Exception as exc:
            if failed:
                # The connection is usually dead and the pool's reset fails too:
                # expected, and the caller gets the error that caused it.
                _log.debug("giving back the connection after a failed %s session %r failed",
                           operation, session, exc_info=True)
            else:
                _log.warning(
                    "%s session %r succeeded, and anything it wrote is committed; giving its "
                    "connection back to the pool then failed (%s), so the pool closes that connection "
                    "and opens a new one when it next needs one",
                    operation, session, _describe(exc),
                )


@asynccontextmanager
async def _transaction(conn: Any, deadline: _Deadline, opening: str = "") -> AsyncIterator[str]:
    """One transaction: ``BEGIN`` and the ``opening`` statements (none, or some separated
    by ``;``, without parameters) in one simple-protocol message, one round trip. It is
    READ COMMITTED whatever the server's or role's default, so each statement takes a
    fresh snapshot, and a lock taken by one is held before the next reads. Yields the
    last statement's status ("BEGIN", "SELECT 1", ...).

    Rolled back if the block raises (a failing rollback is logged, the block's error is
    what propagates), committed if it does not; neither when the connection's state is
    unknown (a statement timed out: see :func:`_pooled`). Every statement, ROLLBACK and
    COMMIT get what is left of ``deadline``. Raises :class:`_CommitLost` when the
    connection is lost once COMMIT was sent, and :class:`_InTransaction` before sending
    anything when the connection is inside a transaction already (a "pool" handing out
    an application's connection): the store's COMMIT would commit the application's work."""
    if conn.is_in_transaction():
        raise _InTransaction(
            "the connection is inside a transaction the application opened; "
            "commit or roll back before the store uses it"
        )
    try:
        status: str = await conn.execute(f"BEGIN ISOLATION LEVEL READ COMMITTED;{opening}", timeout=deadline.left())
        yield status
        left = deadline.left()  # raising here, COMMIT is never sent
    except BaseException as exc:
        # A closed connection has nothing to roll back: the server rolls back on
        # disconnect, as it does when _pooled closes a connection in an unknown state.
        if not _is_closed(conn) and not _unsure(exc):
            try:
                await conn.execute("ROLLBACK;", timeout=deadline.for_release())
            except Exception:
                _log.debug("rollback failed", exc_info=True)
                conn.terminate()
        raise
    # A connection already closed never sent COMMIT: the server rolled back.
    sent = not _is_closed(conn)
    try:
        await conn.execute("COMMIT;", timeout=left)
    except Exception as exc:
        # The server answering with an error on a live connection is a refusal (the
        # transaction rolled back); anything else leaves the outcome unknown.
        if sent and (_is_closed(conn) or not isinstance(exc, asyncpg.PostgresError)):
            raise _CommitLost(str(exc)) from exc
        raise


def _literal(key: bytes) -> str:
    """``key`` as a SQL expression of type ``bytea`` made of hex digits only."""
    return f"decode('{key.hex()}', 'hex')"


def _retrieve(task: asyncio.Future[Any]) -> None:
    # Its error is logged by whoever awaited it, or not worth a "never retrieved" line.
    if not task.cancelled():
        task.exception()


def _unsure(exc: BaseException) -> bool:
    """Whether ``exc`` leaves the connection in a state nobody knows (mid-statement, a
    cancel request pending, the protocol broken), so that only closing it is safe. A
    server's error and the store's own refusals leave it ready for ROLLBACK."""
    unsure = (_CommitLost, OSError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError)
    return isinstance(exc, unsure) or not isinstance(exc, Exception)


def _is_closed(conn: Any) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        # A pool's connection proxy, already handed back because the connection died.
        return True


def _steers(rows: list[Any]) -> list[str]:
    return [bytes(r["text"]).decode("utf-8") for r in rows]


def _fail(operation: str, session: str, exc: BaseException, timeout: float) -> NoReturn:
    raise StoreError(f"{operation} session {session!r} failed: {_describe(exc, timeout)}") from exc


def _outcome_unknown(
    operation: str, session: str, lost: _CommitLost, timeout: float, *, steers: list[str] | None = None
) -> NoReturn:
    cause = lost.__cause__ if lost.__cause__ is not None else lost
    what = (
        "COMMIT was sent and got no answer within the store's timeout"
        if isinstance(cause, TimeoutError)
        else "the connection to PostgreSQL was lost after COMMIT was sent"
    )
    raise OutcomeUnknown(
        f"{operation} session {session!r} may or may not have taken effect: {what} "
        f"({_describe(cause, timeout)})",
        steers=steers or (),
    ) from cause


def _describe(exc: BaseException, timeout: float | None = None) -> str:
    text = str(exc)
    if isinstance(exc, TimeoutError) and not text:
        # asyncpg's statement timeout says nothing.
        bound = f" of {timeout:g} s" if timeout is not None else ""
        return f"PostgreSQL did not answer within the store's timeout{bound}"
    if isinstance(exc, asyncpg.InterfaceError) and "pool is closed" in text:
        return "the pool is closed"
    if isinstance(exc, (asyncpg.ConnectionDoesNotExistError, ConnectionError)) or (
        isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in text
    ):
        return f"the connection to PostgreSQL was lost ({text or type(exc).__name__})"
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        return f"the connection to PostgreSQL broke mid-protocol ({text})"
    return text or type(exc).__name__
