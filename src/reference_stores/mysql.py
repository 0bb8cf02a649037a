"""A synchronous store on MySQL 8 / MariaDB 10.11+ through pymysql.

It takes the connection the application already has (or a callable handing out
connections, e.g. a pool's checkout), never a DSN, and runs no DDL: the application
applies :data:`SCHEMA` with its migrations. The runtime user needs only SELECT, INSERT,
UPDATE and DELETE on the three tables.

How it keeps each MySQL/MariaDB fact that breaks naive stores:

- MySQL ``JSON`` rewrites text, ``TEXT`` stops at 64 KiB: messages are encoded with
  :func:`storetest.codec.encode_message` (tool-call arguments stay a JSON *string*) into
  a ``LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin`` column, one row per message.
- ``utf8``/``utf8mb3`` cannot hold emoji and a server may still default to ``latin1``:
  every table declares ``DEFAULT CHARSET=utf8mb4`` and every column that holds text says
  so itself; the store switches a connection that does not speak ``utf8mb4`` to it
  (``SET NAMES utf8mb4`` through pymysql) before using it.
- Default collations fold case, accents and trailing spaces: session ids are stored as
  their UTF-8 bytes in ``VARBINARY(512)``, compared byte for byte, NO PAD. Steers are the
  UTF-8 bytes of the text in ``LONGBLOB``, so NUL, CRLF and trailing spaces survive.
- Row order is unspecified without ``ORDER BY``: every read that returns rows orders them
  (messages by position, steers by their ``AUTO_INCREMENT`` id).
- ``take_steers`` locks the session's row in ``agent_sessions``, then on MariaDB deletes
  the session's steers in one ``DELETE ... RETURNING`` and sorts what it returns by id
  (``RETURNING`` promises no order); MySQL has no ``DELETE ... RETURNING``, so there it
  selects the steers ``FOR UPDATE`` ordered by id and deletes exactly those ids, 1,000
  to a statement. One transaction, committed once the rows are in hand. ``add_steer``
  takes the same row lock, so per session, adders and takers run one at a time and ids
  follow commit order. A take is five round trips on MariaDB however many steers it
  takes (``SET TRANSACTION``, ``BEGIN``, the lock, the ``DELETE``, ``COMMIT``; counted
  on the wire by ``tests/test_mysql_store.py``); on MySQL the ``SELECT`` replaces the
  ``DELETE`` and each 1,000 steers taken add one more.
- Saves are one transaction under the session's row lock, so concurrent saves leave one
  whole transcript; a read is one statement (a consistent snapshot of its own), so it
  sees the old transcript or the new one, never a mix.

A save writes only what changed, through :mod:`reference_stores._incremental`:
``agent_sessions.version`` is raised by every save that changes something, under the
row lock; each message row carries a chain digest; each handle remembers recent sessions.
A save finds the unchanged prefix in work proportional to the change, whether this handle
or another wrote last, and never decodes a stored message to do so. So write these tables
only through the store: a row changed behind its back without a version bump goes unseen.

Lost connections and packet limits:

- A statement may not exceed the server's ``max_allowed_packet`` (MySQL 8 defaults to
  64 MiB, MariaDB to 16 MiB; beyond it the server drops the connection, and the client
  sees "MySQL server has gone away"). The store reads the limit from the server and
  cuts a save's inserts into statements that fit it, so many small messages always
  save; a single message or steer too large for it is refused before it is sent, with
  an error naming the limit and the setting.
- A connection given to the store and lost (``KILL``, a server restart, a network
  failure) is reconnected by the next operation; the one that saw it fail raises
  :class:`~storetest.contract.StoreError`, having changed nothing.
- A connection lost after COMMIT was sent raises
  :class:`~storetest.contract.OutcomeUnknown` (a take's carries the steers it read).

Stalled connections: the store takes its bound from the connection's ``read_timeout``
and ``write_timeout`` (the larger), fixed when the application makes the connection
(both ``None``, no bound, by default). Give them: the bound is per call, not per wait:
every read and write of a call waits at most what is left of it, counted from the
call's first statement (pymysql bounds each wait alone, so a call of eight round trips,
each answered just in time, took eight times the timeout), and once it is spent the
connection is closed and the call raises :class:`~storetest.contract.StoreError` (or
:class:`~storetest.contract.OutcomeUnknown` if it was COMMIT's answer that never came);
the next call reconnects. Opening a connection (a factory's, or a reconnect) is bounded
by the connection's own ``connect_timeout`` and ``read_timeout`` before that.
``tests/test_faults_mysql.py`` delays every reply just under the timeout. The store warns (:class:`UnboundedCalls`) when
it is given a connection without them, at construction, or for a factory at the first
such connection it hands out. :func:`storetest.databases.mysql_connection` sets both
to 30 seconds. A store given one connection runs one call at a time, so a call queued
behind a stalled one waits for it first: where every call must end within the bound,
give each thread a store of its own, or give the store a factory.

Server settings it relies on: ``max_allowed_packet`` above the largest encoded message;
and, for ``READ COMMITTED`` writes, a binary log that is off or ``ROW``/``MIXED`` (the
defaults), not ``STATEMENT``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import pymysql

from reference_stores._incremental import DEFAULT_CACHE_SESSIONS, Remembered, encoded
from storetest.codec import CodecError, decode_trusted
from storetest.contract import (
    Message,
    OutcomeUnknown,
    StoreError,
    check_session_id,
    check_steer_text,
)

__all__ = ["SCHEMA", "MySQLStore", "UnboundedCalls"]

_log = logging.getLogger(__name__)

#: The DDL, one statement per item. The store runs none of it; apply it with your
#: migrations. Every statement is idempotent (``CREATE TABLE IF NOT EXISTS``).
SCHEMA: Final[tuple[str, ...]] = (
    """CREATE TABLE IF NOT EXISTS agent_sessions (
    session VARBINARY(512) NOT NULL,
    version BIGINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (session)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS agent_messages (
    session VARBINARY(512) NOT NULL,
    position INT UNSIGNED NOT NULL,
    digest BINARY(32) NOT NULL,
    body LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (session, position)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS agent_steers (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    session VARBINARY(512) NOT NULL,
    text LONGBLOB NOT NULL,
    PRIMARY KEY (id),
    KEY agent_steers_session (session, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)

# Errors after which the server has rolled back (all or the statement) and the whole
# transaction can safely run again: deadlock, lock wait timeout.
_RETRYABLE: Final = frozenset({1213, 1205})
_ATTEMPTS: Final = 6
_NO_SUCH_TABLE: Final = 1146
_IN_TRANSACTION: Final = 1568  # "Transaction characteristics can't be changed ..."
_DELETE_CHUNK: Final = 1000
# Server errors that end the connection: the server is shutting down, the connection
# was killed, a packet was too large. Client-side codes (2000-2999: "gone away",
# "lost connection") mean the same.
_CONNECTION_ENDED: Final = frozenset({1053, 1152, 1153, 1156, 1927})
_PACKET_TOO_LARGE: Final = frozenset({1153, 1301})
# Room in a statement for everything around a row's values (the INSERT, separators).
_STATEMENT_OVERHEAD: Final = 1024

# READ COMMITTED for every writing transaction: correctness comes from the per-session
# row lock, not from snapshots, and READ COMMITTED takes no gap or next-key locks, so a
# taker's locking read of the steers index does not block (or deadlock with) an insert
# into a neighbouring session's range. Under it each statement reads the latest
# committed rows, so whatever we read after taking the row lock is current.
_WRITE_ISOLATION: Final = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

_T = TypeVar("_T")


class UnboundedCalls(RuntimeWarning):
    """The store was given a pymysql connection without ``read_timeout`` or
    ``write_timeout``: a call on a stalled network would wait for as long as the stall."""


def _warn_if_unbounded(conn: Any, stacklevel: int) -> bool:
    """Warn if ``conn`` lacks a read or write timeout; return whether it did."""
    missing = [n for n in ("read_timeout", "write_timeout") if getattr(conn, f"_{n}", None) is None]
    if missing:
        warnings.warn(
            f"the pymysql connection given to MySQLStore has no {' and no '.join(missing)}: "
            "a call on a stalled network would wait for as long as the stall; pass "
            "read_timeout= and write_timeout= (seconds) to pymysql.connect",
            UnboundedCalls,
            stacklevel=stacklevel + 1,
        )
    return bool(missing)


class MySQLStore:
    """Sessions' transcripts and steer queues in MySQL/MariaDB tables (see :data:`SCHEMA`).

    Methods are plain synchronous functions, safe to call from many threads:

    - given a connection, the store uses only it and holds a lock around each whole
      operation (a pymysql connection is not thread-safe), so one handle runs one
      operation at a time;
    - given a callable, the store calls it once per operation for a connection of its
      own, uses it for that one transaction, then calls its ``close()`` (which a pool
      takes as "give it back"). Threads then run in parallel; a callable that opens a
      fresh connection works too but pays a connect per operation.

    Every operation runs and commits a transaction of its own. A transaction the
    application left open on the connection is committed first (``BEGIN`` would do so
    anyway), so do not hand the store a connection in the middle of work of yours.

    :param connection_or_factory: a pymysql connection, or a zero-argument callable
        returning one; made with ``read_timeout`` and ``write_timeout``, which bound
        every call (see the module docstring; :class:`UnboundedCalls` warns without).
    :param cache_sessions: how many sessions' last known transcripts to remember for
        incremental saves (least recently used are forgotten first); ``0`` disables it.
    :raises TypeError: ``connection_or_factory`` is neither a pymysql connection nor
        callable.
    :raises ValueError: ``cache_sessions`` is negative.
    """

    def __init__(
        self,
        connection_or_factory: pymysql.connections.Connection | Callable[[], Any],
        *,
        cache_sessions: int = DEFAULT_CACHE_SESSIONS,
    ) -> None:
        # Whether to look at the next factory connection's timeouts (once warned, never).
        self._check_timeouts = True
        if isinstance(connection_or_factory, pymysql.connections.Connection):
            self._connection: Any = connection_or_factory
            self._factory: Callable[[], Any] | None = None
            _warn_if_unbounded(connection_or_factory, stacklevel=2)
        elif callable(connection_or_factory):
            self._connection = None
            self._factory = connection_or_factory
        else:
            raise TypeError(
                "MySQLStore needs a pymysql connection or a zero-argument callable returning "
                f"one (e.g. a pool's checkout), not {type(connection_or_factory).__name__}; "
                "it never takes a DSN"
            )
        self._remembered = Remembered(cache_sessions)
        self._connection_lock = threading.Lock()
        # The server's max_allowed_packet, read when first needed and again after a
        # connection ends (it may have been a packet error, or another server).
        self._packet_limit: int | None = None

    def __repr__(self) -> str:
        mode = "factory" if self._factory is not None else "connection"
        return f"<MySQLStore ({mode})>"

    # -- the contract -----------------------------------------------------------------

    def save(self, session: str, messages: Sequence[Message]) -> None:
        """Make the session's transcript exactly ``messages``, in one transaction.

        :raises TypeError, ValueError: a bad session id or a non-message item (before
            anything is written).
        :raises StoreError: the database failed; nothing was changed.
        """
        session = check_session_id(session)
        key = session.encode("utf-8")
        plan = self._remembered.prepare(key, messages)

        def write(cur: Any) -> int:
            cur.execute("SELECT version FROM agent_sessions WHERE session = %s FOR UPDATE", (key,))
            row = cur.fetchone()
            if row is None:
                # A concurrent first save of the same session may insert too: the loser
                # waits on the row lock, then updates nothing (ODKU) and reads it.
                cur.execute(
                    "INSERT INTO agent_sessions (session, version) VALUES (%s, 0) "
                    "ON DUPLICATE KEY UPDATE version = version",
                    (key,),
                )
                cur.execute("SELECT version FROM agent_sessions WHERE session = %s FOR UPDATE", (key,))
                row = cur.fetchone()
            version = int(row[0])
            plan.start(version)  # again after a retried deadlock: the rows may differ
            while plan.fetch_from is not None:
                cur.execute(
                    "SELECT position, digest FROM agent_messages "
                    "WHERE session = %s AND position >= %s ORDER BY position",
                    (key, plan.fetch_from),
                )
                plan.resolve(cur.fetchall())
            if not plan.changed:
                return version  # nothing changed; the version still names this transcript
            if plan.delete:
                cur.execute(
                    "DELETE FROM agent_messages WHERE session = %s AND position >= %s",
                    (key, plan.keep),
                )
            if plan.rows:
                rows = [(key, position, digest, encoded(plan.new[position], text))
                        for position, digest, text in plan.rows]
                self._check_fits(cur, rows)
                cur.executemany(
                    "INSERT INTO agent_messages (session, position, digest, body) VALUES (%s, %s, %s, %s)",
                    rows,
                )
            cur.execute("UPDATE agent_sessions SET version = version + 1 WHERE session = %s", (key,))
            return version + 1

        try:
            version = self._transaction("save to", session, write)
        except BaseException:
            self._remembered.forget(key)
            raise
        # Only now is it true that the database holds the new transcript at `version`.
        self._remembered.learn(key, plan.known(version))

    def messages(self, session: str) -> list[Message]:
        """The transcript in the order saved; ``[]`` for a session never used.

        :raises TypeError, ValueError: a bad session id.
        :raises StoreError: the database failed, or a stored row is not an encoded message.
        """
        session = check_session_id(session)
        key = session.encode("utf-8")

        def read(cur: Any) -> list[Message]:
            # One statement, so one consistent snapshot: the version and the rows belong
            # together even when a save commits meanwhile.
            cur.execute(
                "SELECT s.version, m.digest, m.body FROM agent_sessions s "
                "LEFT JOIN agent_messages m ON m.session = s.session "
                "WHERE s.session = %s ORDER BY m.position",
                (key,),
            )
            rows = cur.fetchall()
            if not rows:
                return []
            stored = [(digest, body) for _, digest, body in rows if body is not None]
            # The store wrote these rows with encode_message: the trusted decoder skips
            # value checks they cannot fail.
            result = [decode_trusted(body) for _, body in stored]
            if self._remembered.wants_read(key, int(rows[0][0]), len(result)):
                self._remembered.learn_read(
                    key, int(rows[0][0]), list(result), (bytes(digest) for digest, _ in stored)
                )
            return result

        return self._transaction("messages of", session, read, writes=False)

    def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session.

        :raises TypeError, ValueError: a bad session id or text.
        :raises StoreError: the database failed; nothing was queued.
        """
        session = check_session_id(session)
        data = check_steer_text(text).encode("utf-8")
        key = session.encode("utf-8")

        def write(cur: Any) -> None:
            # Creates the session's row or locks it: the same lock takers hold, so a
            # steer's id is handed out in the order the adds commit.
            cur.execute(
                "INSERT INTO agent_sessions (session, version) VALUES (%s, 0) "
                "ON DUPLICATE KEY UPDATE version = version",
                (key,),
            )
            limit = self._max_packet(cur) - _STATEMENT_OVERHEAD
            if 2 * len(data) > limit and _sql_size(cur, "%s", (data,)) > limit:
                raise _TooLarge(
                    f"the steer is {len(data):,} bytes, too large for a statement under the "
                    f"server's max_allowed_packet ({limit + _STATEMENT_OVERHEAD:,} bytes); raise "
                    "max_allowed_packet or queue a shorter steer"
                )
            cur.execute("INSERT INTO agent_steers (session, text) VALUES (%s, %s)", (key, data))

        self._transaction("add_steer to", session, write)

    def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none.

        :raises TypeError, ValueError: a bad session id.
        :raises StoreError: the database failed; no steer was removed.
        """
        session = check_session_id(session)
        key = session.encode("utf-8")

        def take(cur: Any) -> list[str]:
            # Takers queue on the session row, never on index ranges: no gap locks, so
            # no deadlock with adders, and each steer goes to exactly one taker.
            cur.execute("SELECT 1 FROM agent_sessions WHERE session = %s FOR UPDATE", (key,))
            if cur.fetchone() is None:
                return []  # add_steer creates the row first, so no row means no steers
            if _deletes_returning(cur.connection):
                # One statement deletes and hands back the rows, in no specified order.
                cur.execute("DELETE FROM agent_steers WHERE session = %s RETURNING id, text", (key,))
                rows = sorted(cur.fetchall(), key=lambda row: int(row[0]))
                return [bytes(row[1]).decode("utf-8") for row in rows]
            cur.execute(
                "SELECT id, text FROM agent_steers WHERE session = %s ORDER BY id FOR UPDATE",
                (key,),
            )
            rows = cur.fetchall()
            ids = [int(row[0]) for row in rows]
            deleted = 0
            for start in range(0, len(ids), _DELETE_CHUNK):
                chunk = ids[start : start + _DELETE_CHUNK]
                marks = ", ".join(["%s"] * len(chunk))
                deleted += cur.execute(f"DELETE FROM agent_steers WHERE id IN ({marks})", chunk)
            if deleted != len(ids):
                raise _Inconsistent(f"locked {len(ids)} steers but deleted {deleted}")
            return [bytes(row[1]).decode("utf-8") for row in rows]

        return self._transaction("take_steers from", session, take, carries_steers=True)

    # -- packet sizes -------------------------------------------------------------------

    def _max_packet(self, cur: Any) -> int:
        limit = self._packet_limit
        if limit is None:
            cur.execute("SELECT @@max_allowed_packet")
            limit = self._packet_limit = int(cur.fetchone()[0])
        return limit

    def _check_fits(self, cur: Any, rows: list[tuple[bytes, int, bytes, str]]) -> None:
        """Refuse, before sending anything, a message that no statement can carry; and
        have ``executemany`` cut its multi-row INSERTs to fit ``max_allowed_packet``."""
        limit = self._max_packet(cur) - _STATEMENT_OVERHEAD
        # Never larger batches than pymysql's own default: only ever smaller, to fit.
        cur.max_stmt_length = min(limit, pymysql.cursors.Cursor.max_stmt_length)
        for row in rows:
            # Escaping at most doubles a value; measure exactly only near the limit.
            if 2 * (len(row[3]) * 4 + len(row[0])) + 128 > limit:
                size = _sql_size(cur, "(%s, %s, %s, %s)", row)
                if size > limit:
                    raise _TooLarge(
                        f"message {row[1]} is {size:,} bytes as SQL, too large for a statement "
                        f"under the server's max_allowed_packet ({limit + _STATEMENT_OVERHEAD:,} "
                        "bytes); raise max_allowed_packet or save smaller messages"
                    )

    # -- transactions and connections -------------------------------------------------

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        if self._factory is None:
            with self._connection_lock:
                conn = self._connection
                # Lost by an earlier operation (which raised StoreError): reconnect, or
                # every later call fails with "(0, '')". One the application closed
                # itself (pymysql marks that) stays closed.
                if not conn.open and not getattr(conn, "_closed", False):
                    self._packet_limit = None
                    conn.connect()
                yield self._ready(conn)
            return
        conn = self._factory()
        if self._check_timeouts and _warn_if_unbounded(conn, stacklevel=5):
            self._check_timeouts = False
        try:
            yield self._ready(conn)
        finally:
            try:
                conn.close()
            except Exception:
                _log.warning("closing a connection from the factory failed", exc_info=True)

    @staticmethod
    def _ready(conn: Any) -> Any:
        # pymysql encodes str parameters with the connection's charset; anything less
        # than utf8mb4 would refuse emoji or garble them.
        if getattr(conn, "charset", None) != "utf8mb4":
            conn.set_character_set("utf8mb4")
        # Plain tuples whatever cursorclass the application chose for its connection.
        return conn.cursor(pymysql.cursors.Cursor)

    def _transaction(
        self,
        operation: str,
        session: str,
        work: Callable[[Any], _T],
        *,
        writes: bool = True,
        carries_steers: bool = False,
    ) -> _T:
        """Run ``work(cursor)`` in one transaction, retrying deadlocks and lock timeouts.

        Any failure is rolled back and raised as :class:`StoreError` naming ``operation``
        and ``session``; a rollback that fails too is logged, never raised instead. A
        connection lost after COMMIT was sent raises :class:`OutcomeUnknown` instead
        (with ``work``'s result as its steers if ``carries_steers``).
        """
        what = f"{operation} session {session!r}"
        try:
            with self._cursor() as cur, _deadline(cur.connection):
                conn = cur.connection
                for attempt in range(1, _ATTEMPTS + 1):
                    try:
                        _begin(cur, writes=writes)
                        result = work(cur)
                    except pymysql.err.MySQLError as exc:
                        _rollback(conn, what)
                        if _retryable(exc) and attempt < _ATTEMPTS:
                            _back_off(attempt)
                            continue
                        raise
                    except BaseException:
                        _rollback(conn, what)
                        raise
                    sent = conn.open  # a closed connection sends nothing: no COMMIT
                    try:
                        conn.commit()
                    except (pymysql.err.MySQLError, OSError) as exc:
                        if sent and _connection_ended(exc) and not isinstance(exc, _NotSent):
                            if not writes:
                                return result  # a read has its rows; there was nothing to commit
                            raise _CommitLost(result) from exc
                        _rollback(conn, what)
                        if _retryable(exc) and attempt < _ATTEMPTS:
                            _back_off(attempt)
                            continue
                        raise
                    return result
                raise AssertionError("unreachable: the last attempt returns or raises")
        except _CommitLost as lost:
            cause = lost.__cause__ or lost
            message = (
                f"{what} may or may not have taken effect: the connection was lost after "
                f"COMMIT was sent ({_describe(cause)})"
            )
            self._packet_limit = None
            raise OutcomeUnknown(message, steers=lost.result if carries_steers else ()) from cause
        except (pymysql.err.MySQLError, OSError, CodecError, UnicodeError, _Inconsistent, _TooLarge) as exc:
            limit = self._packet_limit
            if _connection_ended(exc):
                self._packet_limit = None
            raise StoreError(f"{what} failed: {_describe(exc, limit)}") from exc


def _deletes_returning(conn: Any) -> bool:
    """Whether the server has ``DELETE ... RETURNING``: MariaDB does (since 10.0.5),
    MySQL does not. Its version string, from the handshake, says which it is."""
    return "mariadb" in str(conn.get_server_info()).lower()


def _sql_size(cur: Any, template: str, args: tuple[Any, ...]) -> int:
    # Bytes values are escaped into surrogates, which the driver sends as raw bytes.
    return len(cur.mogrify(template, args).encode("utf-8", "surrogateescape"))


def _retryable(exc: BaseException) -> bool:
    return bool(exc.args) and exc.args[0] in _RETRYABLE


def _back_off(attempt: int) -> None:
    # Jitter, so the same transactions do not collide again.
    time.sleep(random.uniform(0, 0.005 * 2**attempt))


def _connection_ended(exc: BaseException) -> bool:
    if not isinstance(exc, pymysql.err.MySQLError):
        return isinstance(exc, OSError)
    code = exc.args[0] if exc.args else None
    return not isinstance(code, int) or code == 0 or 2000 <= code < 3000 or code in _CONNECTION_ENDED


class _NotSent(pymysql.err.OperationalError):  # type: ignore[misc]
    """The call's bound ran out before a write: nothing of it was sent."""


@contextmanager
def _deadline(conn: Any) -> Iterator[None]:
    """One bound for the whole call, not for each wait: every read and write of the
    connection while inside waits at most what is left of the connection's
    ``read_timeout`` (or ``write_timeout``, the larger) counted from the start, and
    once nothing is left the connection is closed, as pymysql closes it when a wait
    times out. pymysql sets its socket's timeout to the connection's setting before each
    packet; the store's own reads and writes go through ``_read_bytes`` and
    ``_write_bytes``, which are wrapped for the call (on this connection only) and
    restored after it."""
    limits = [t for t in (getattr(conn, "_read_timeout", None), getattr(conn, "_write_timeout", None)) if t]
    read_bytes, write_bytes = getattr(conn, "_read_bytes", None), getattr(conn, "_write_bytes", None)
    if not limits or read_bytes is None or write_bytes is None:
        yield
        return
    bound = float(max(limits))
    end = time.monotonic() + bound

    def left(sending: bool) -> float:
        remaining = end - time.monotonic()
        if remaining <= 0:
            conn._force_close()
            kind = _NotSent if sending else pymysql.err.OperationalError
            raise kind(2013, f"Lost connection to MySQL server during query (the call's bound of {bound:g} s ran out)")
        conn._sock.settimeout(remaining)
        conn._current_timeout = None  # pymysql sets its own again at the next packet after the call
        return remaining

    def bounded_read(num_bytes: int) -> Any:
        left(False)
        return read_bytes(num_bytes)

    def bounded_write(data: Any) -> Any:
        left(True)
        conn._current_timeout = conn._write_timeout  # stops pymysql resetting it to the full timeout
        return write_bytes(data)

    conn._read_bytes, conn._write_bytes = bounded_read, bounded_write
    try:
        yield
    finally:
        del conn._read_bytes, conn._write_bytes
        conn._current_timeout = None


class _CommitLost(Exception):
    """COMMIT was sent and the connection ended before its answer came back."""

    def __init__(self, result: Any) -> None:
        super().__init__("the connection was lost after COMMIT was sent")
        self.result = result


def _begin(cur: Any, *, writes: bool) -> None:
    conn = cur.connection
    if writes:
        try:
            cur.execute(_WRITE_ISOLATION)
        except pymysql.err.MySQLError as exc:
            if not exc.args or exc.args[0] != _IN_TRANSACTION:
                raise
            # The application left a transaction open on its connection (a plain SELECT
            # with autocommit off does that). BEGIN would commit it anyway; do it first,
            # since the isolation level cannot change inside it.
            conn.commit()
            cur.execute(_WRITE_ISOLATION)
    # BEGIN also ends whatever snapshot an earlier read left open on a connection with
    # autocommit off, so every operation reads what is committed now.
    conn.begin()


class _Inconsistent(Exception):
    """The database did something the store's locking rules out."""


class _TooLarge(Exception):
    """A value no statement under the server's max_allowed_packet can carry."""


def _describe(exc: BaseException, packet_limit: int | None = None) -> str:
    code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
    if code == _NO_SUCH_TABLE:
        return f"{exc} (apply reference_stores.mysql.SCHEMA first)"
    if code in _PACKET_TOO_LARGE:
        known = f" ({packet_limit:,} bytes)" if packet_limit else ""
        return f"{exc} (a statement exceeded the server's max_allowed_packet{known})"
    if isinstance(exc, CodecError):
        return f"a stored message is not ours: {exc}"
    return str(exc) or type(exc).__name__


def _rollback(conn: Any, what: str) -> None:
    if not conn.open:
        return  # the connection is gone, and the server rolls back on disconnect
    try:
        conn.rollback()
    except Exception as exc:
        # The error that brought us here is the one the caller needs. A connection
        # that ended is expected after a lost one: only worth a debug line.
        level = logging.DEBUG if _connection_ended(exc) else logging.WARNING
        _log.log(level, "rollback after a failed %s failed", what, exc_info=True)
