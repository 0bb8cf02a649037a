"""The SQLite store: standard-library ``sqlite3`` only, one database file shared by
every handle, thread and process that opens it.

How it keeps each SQLite fact that breaks naive stores:

- *A column declared ``JSON`` or ``STRING`` has NUMERIC affinity* (``'1.0'`` comes back
  as ``1``): every column holding text is declared ``TEXT`` or ``BLOB``. A message that
  is one piece of text, the common one, is its ``role`` and its raw text in ``body``
  (both ``TEXT``), read back with no JSON to parse; so is a message of one tool call or
  one tool result, as its ``kind``, ``call_id``, tool ``name`` and raw arguments or
  content in ``body`` (see ``_columns``); any other message is
  :func:`storetest.codec.encode_message` text in ``body``, with no ``role``. Session ids
  and steer text are ``BLOB`` of their UTF-8 bytes, so keys compare with ``memcmp``:
  no collation, case, accent, normalization or trailing-space folding.
- *SQL functions stop at a NUL*: no SQL function ever touches a stored value. Steers
  and session ids may contain NUL and live in ``BLOB`` columns. A raw message text may
  hold NUL too, in its ``TEXT`` column: SQLite keeps a value's length, and only SQL
  functions stop at a NUL (``tests/test_sqlite_store.py`` stores one).
- *A deferred transaction that reads and then writes fails with "database is
  locked"*: every write (``save``, ``add_steer``, ``take_steers``) runs in
  ``BEGIN IMMEDIATE``, which takes the write lock before reading, and waits up to
  :data:`BUSY_TIMEOUT_MS` for it. ``take_steers`` is one ``DELETE ... RETURNING`` inside
  that transaction, so each steer goes to exactly one caller across threads, handles
  and processes; ``RETURNING`` has no defined order, so the rows are sorted by their
  ``AUTOINCREMENT`` id, which is the order they were added.
- *Without ``ORDER BY`` row order is unspecified*: every read that returns rows orders
  them (messages by position).

Durability is the ``synchronous`` option. The database runs in WAL mode (readers never
wait for the writer and see one snapshot per transaction) and, by default,
``synchronous=FULL``: every commit is fsynced before the call returns, so a power cut
loses nothing that was acknowledged. ``synchronous="NORMAL"`` fsyncs only at
checkpoints, which makes a commit cheaper (``benchmarks/peers.py`` measures both). As
SQLite documents, it never corrupts the file, but a power cut or OS crash (not a
process crash) can undo the commits since the last checkpoint (by default the WAL is
checkpointed every 1,000 pages): the last saves, and steers already acknowledged.

Saves are incremental, through :mod:`reference_stores._incremental`: a ``version``
counter per session, a chain digest per message row, and a per-handle memory of recent
sessions, so that a save finds the unchanged prefix, and writes only what changed, in
work proportional to the change, whether this handle or another wrote last.

A save that only appends leaves the version alone (a save that deletes rows raises it,
by :data:`_VERSION_STEP`), so the common save, new messages after what this handle
wrote or read last, is one ``INSERT ... SELECT`` in autocommit mode: its own
transaction, guarded by the remembered version, and refused whole by the primary key
if another handle appended meanwhile. It writes no session row and opens no
transaction of its own. Refused, the save runs the transaction: ``BEGIN IMMEDIATE``,
the version and the count of rows, the digests it needs. Releases before this one raised
the version on every save and would miss rows appended without a raise; a trigger
refuses their raise, so a process running one fails loudly.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Final, Literal

from reference_stores._entry_codec import gc_paused
from reference_stores._incremental import DEFAULT_CACHE_SESSIONS, Known, Remembered
from storetest.codec import (
    CodecError,
    decode_trusted,
    trusted_text_message,
    trusted_tool_call_message,
    trusted_tool_result_message,
)
from storetest.contract import (
    ROLES,
    Message,
    StoreError,
    Text,
    ToolCall,
    ToolResult,
    check_session_id,
    check_steer_text,
)

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA", "SYNCHRONOUS_MODES", "SQLiteStore"]

_log = logging.getLogger(__name__)

_OLDER_RELEASE: Final = (
    "a SQLiteStore from a release before appends left the version alone is saving to this "
    "database; upgrade storetest in that process"
)

#: How long a write waits for another connection's write lock before failing.
BUSY_TIMEOUT_MS: Final = 30_000

#: The ``synchronous`` settings the store accepts. ``OFF`` is refused: with it a power
#: cut can corrupt the database, not only lose the last commits.
SYNCHRONOUS_MODES: Final = ("NORMAL", "FULL", "EXTRA")

Synchronous = Literal["NORMAL", "FULL", "EXTRA"]

#: The tables the store creates when opened, one idempotent statement each. Message rows
#: name their session by its small integer ``id``, not by the id string, which can be
#: hundreds of bytes, and live in a ``WITHOUT ROWID`` table: one b-tree keyed by
#: (session, position), where a rowid table would keep every key twice.
SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS storetest_sessions (
    id INTEGER PRIMARY KEY,
    session BLOB NOT NULL UNIQUE,
    version INTEGER NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS storetest_messages (
    session_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    digest BLOB NOT NULL,
    role TEXT,
    body TEXT NOT NULL,
    kind TEXT,
    call_id TEXT,
    name TEXT,
    PRIMARY KEY (session_id, position)
) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS storetest_steers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session BLOB NOT NULL,
    text BLOB NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS storetest_steers_by_session ON storetest_steers (session, id)",
    # Earlier releases raised the version by 1 on every save and so trusted an unchanged
    # version to mean unchanged rows, appended ones included: they would miss rows this
    # release appends. Their raise is refused, so such a process fails loudly.
    f"""CREATE TRIGGER IF NOT EXISTS storetest_sessions_version_step
BEFORE UPDATE OF version ON storetest_sessions WHEN NEW.version = OLD.version + 1
BEGIN SELECT RAISE(ABORT, '{_OLDER_RELEASE}'); END""",
)

#: A save that changes rows other than by appending raises its session's version by
#: this much (a save that only appends leaves it: the stored rows are then counted).
#: Not 1, the step of earlier releases, which the schema's trigger refuses.
_VERSION_STEP: Final = 2

#: Most rows :func:`_append` writes in one statement (7 parameters a row, under the
#: 999 that SQLite builds before 3.32 allow).
_APPEND_ROWS_MAX: Final = 64

#: The columns a file made before tool parts had columns of their own lacks, and gets
#: when opened (``ALTER TABLE ... ADD COLUMN``; every row it holds then reads as before).
_ADDED_COLUMNS: Final = ("kind", "call_id", "name")

_INSERT: Final = (
    "INSERT INTO storetest_messages (session_id, position, digest, role, body, kind, call_id, name) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class SQLiteStore:
    """A synchronous session store in one SQLite database.

    Thread-safe: a store uses one connection, opened with ``check_same_thread=False``
    and used only while holding the store's lock. A connection must not be used by
    two threads at once, and SQLite lets only one writer at a time into a file anyway,
    so a connection per thread would buy only parallel reads, at the price of
    connections that :meth:`close` could not reach. For parallelism, open several
    stores on the same file: they are replicas, as are stores in other processes.

    The store remembers, per session, what it last wrote or read (references to the
    frozen messages, not copies, and 32 bytes of digest per message; at most
    ``cache_sessions`` sessions, least recently used dropped first), so that a save
    writes only what changed. Applications must not write the store's tables
    themselves: a change that does not raise the session's ``version`` goes unseen.

    :param path_or_connection: a filesystem path (``str`` or ``os.PathLike``): the store
        opens its own connection, sets WAL mode, ``synchronous`` and a 30 s busy
        timeout, and closes it in :meth:`close`. Or an open ``sqlite3.Connection``: the
        application keeps owning it (``close`` leaves it open, and its journal mode
        and ``synchronous`` setting are left alone); the store only raises its busy
        timeout to 30 s. It must not be inside a transaction, must not be used by the
        application while a store method runs, and must have been opened with
        ``check_same_thread=False`` if the store is called from other threads.
    :param synchronous: ``"FULL"`` (the default: a commit returns once it is on disk,
        and a power cut loses nothing acknowledged), ``"NORMAL"`` (fsync at WAL
        checkpoints only: far cheaper commits, never a corrupt file, but a power cut
        can undo the commits since the last checkpoint) or ``"EXTRA"``. Only for a
        store that opens its own connection.
    :param cache_sessions: how many sessions' last-known transcripts to remember for
        incremental saves; ``0`` turns remembering off (every save then reads all
        stored digests).
    :raises TypeError: ``path_or_connection`` is neither a path nor a connection.
    :raises ValueError: the connection is inside a transaction, ``synchronous`` is not
        one of :data:`SYNCHRONOUS_MODES` or is given with a connection, or
        ``cache_sessions`` is negative.
    :raises StoreError: the database could not be opened or its tables created.

    Methods raise ``TypeError``/``ValueError`` for bad arguments before touching the
    database, and :class:`~storetest.contract.StoreError` (from the ``sqlite3`` error)
    when the database fails or the store is closed, after rolling back.
    """

    def __init__(
        self,
        path_or_connection: str | os.PathLike[str] | sqlite3.Connection,
        *,
        synchronous: Synchronous | None = None,
        cache_sessions: int = DEFAULT_CACHE_SESSIONS,
    ) -> None:
        self._remembered = Remembered(cache_sessions)
        if synchronous is not None and synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(
                f"synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, not {synchronous!r} "
                "(OFF is refused: a power cut can corrupt the database; NORMAL only loses "
                "the last commits)"
            )
        self._lock = threading.Lock()
        self._closed = False
        if isinstance(path_or_connection, sqlite3.Connection):
            if synchronous is not None:
                raise ValueError(
                    "synchronous is set by the store only on a connection it opens; on your "
                    "own connection run PRAGMA synchronous yourself"
                )
            if path_or_connection.in_transaction:
                raise ValueError(
                    "the connection is inside a transaction; commit or roll back before "
                    "giving it to SQLiteStore"
                )
            self._conn = path_or_connection
            self._owns_connection = False
            self._where = "the given connection"
        elif isinstance(path_or_connection, (str, os.PathLike)):
            path = os.fspath(path_or_connection)
            if not isinstance(path, str):
                raise TypeError(f"the path must be str, not {type(path).__name__}")
            self._where = repr(path)
            try:
                # isolation_level=None: the store issues BEGIN/COMMIT itself, so the
                # module never opens a transaction behind its back.
                self._conn = sqlite3.connect(
                    path,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise StoreError(f"opening SQLite database {path!r} failed: {exc}") from exc
            self._owns_connection = True
        else:
            raise TypeError(
                "SQLiteStore takes a filesystem path or a sqlite3.Connection, not "
                f"{type(path_or_connection).__name__}"
            )
        self._synchronous: Synchronous = synchronous or "FULL"
        try:
            self._setup()
        except sqlite3.Error as exc:
            self._rollback_quietly()
            if self._owns_connection:
                self._conn.close()
            raise StoreError(f"setting up SQLite database {self._where} failed: {exc}") from exc

    def _setup(self) -> None:
        conn = self._conn
        (timeout,) = conn.execute("PRAGMA busy_timeout").fetchone()
        if timeout < BUSY_TIMEOUT_MS:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if self._owns_connection:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        # One transaction, so two stores opening a new file at once cannot interleave
        # half-created schemas (CREATE ... IF NOT EXISTS is idempotent, not atomic).
        conn.execute("BEGIN IMMEDIATE")
        for statement in SCHEMA:
            conn.execute(statement)
        factory, conn.text_factory = conn.text_factory, str  # an application's may make bytes
        try:
            present = {column for _, column, *_ in conn.execute("PRAGMA table_info(storetest_messages)")}
        finally:
            conn.text_factory = factory
        for column in _ADDED_COLUMNS:
            if column not in present:
                conn.execute(f"ALTER TABLE storetest_messages ADD COLUMN {column} TEXT")
        conn.execute("COMMIT")

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SQLiteStore {self._where} ({state})>"

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop using the database; closes the connection if the store opened it.
        Closing twice is harmless; any later call raises ``StoreError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._remembered.clear()
            if self._owns_connection:
                self._conn.close()

    # -- the contract -------------------------------------------------------------

    def save(self, session: str, messages: Sequence[Message]) -> None:
        """Make the session's transcript exactly ``messages``, in one transaction,
        writing only the rows that changed.

        :raises TypeError, ValueError: a bad session id or a non-``Message`` item
            (nothing is written).
        :raises StoreError: the database failed (nothing is written) or the store is
            closed.
        """
        session = check_session_id(session)
        key = session.encode("utf-8")
        # The common save appends to what this handle wrote or read last: one statement,
        # no transaction of its own to open, and no row but the new (on a connection in
        # autocommit mode, as the store's own always is). Either way the messages are
        # checked before the database is touched.
        appending = (
            self._remembered.plan_append(key, messages) if self._owns_connection or self._in_autocommit() else None
        )
        plan = self._remembered.prepare(key, messages) if appending is None else None
        with self._operation("save to", session) as conn:
            if appending is not None:
                known, grown, rows = appending
                # Remembered before the statement rather than after its fsync
                # (plan_append says why), pending until the statement wrote its rows:
                # a plan another thread makes from it meanwhile checks stored digests
                # (Known.pending). Put back if the statement is refused; forgotten on
                # an error, or an interrupt once swapped in (one inside the swap
                # itself leaves it pending: never trusted, replaced by a later save).
                if conn.isolation_level is None and self._remembered.swap(key, known, grown):
                    try:
                        if _append(conn, key, grown, rows):
                            grown.pending = False
                            return
                        self._remembered.swap(key, grown, known)
                    except BaseException:
                        self._remembered.forget(key)
                        raise
                plan = self._remembered.prepare(key, messages)
                plan.reuse(rows)
            assert plan is not None
            try:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute(
                    "SELECT id, version, (SELECT position + 1 FROM storetest_messages WHERE session_id = id "
                    "ORDER BY position DESC LIMIT 1) FROM storetest_sessions WHERE session = ?",
                    (key,),
                ).fetchone()
                stored_version: int | None = row[1] if row is not None else None
                plan.start(stored_version, (row[2] or 0) if row is not None else None)
                while plan.fetch_from is not None:
                    assert row is not None  # the plan reads rows only of a stored session
                    plan.resolve(
                        conn.execute(
                            "SELECT position, digest FROM storetest_messages "
                            "WHERE session_id = ? AND position >= ? ORDER BY position",
                            (row[0], plan.fetch_from),
                        ).fetchall()
                    )
                if not plan.changed:
                    # Nothing to write, so every handle's remembered version stays true.
                    conn.execute("ROLLBACK")
                    if stored_version is not None:
                        self._remembered.learn(key, plan.known(stored_version))
                    return
                if row is None:
                    (sid,) = conn.execute(
                        "INSERT INTO storetest_sessions (session, version) VALUES (?, 1) RETURNING id",
                        (key,),
                    ).fetchone()
                    version = 1
                else:
                    sid, version = row[0], row[1]
                if plan.delete:
                    # Rows other than appended ones change: the version says so (see
                    # _VERSION_STEP).
                    conn.execute(
                        "DELETE FROM storetest_messages WHERE session_id = ? AND position >= ?",
                        (sid, plan.keep),
                    )
                    conn.execute(
                        f"UPDATE storetest_sessions SET version = version + {_VERSION_STEP} WHERE id = ?", (sid,)
                    )
                    version += _VERSION_STEP
                new, rows = plan.new, plan.rows
                if len(rows) == 1:
                    # The common save, one message more: execute skips executemany's
                    # iterator and per-row cursor reset.
                    ((position, digest, body),) = rows
                    conn.execute(_INSERT, (sid, position, digest, *_columns(new[position], body)))
                elif rows:
                    conn.executemany(
                        _INSERT,
                        [(sid, position, digest, *_columns(new[position], body)) for position, digest, body in rows],
                    )
                conn.execute("COMMIT")
            except BaseException:
                # Rolled back, or perhaps not: what this handle remembers may be stale.
                self._remembered.forget(key)
                raise
            self._remembered.learn(key, plan.known(version))

    def messages(self, session: str) -> list[Message]:
        """The session's transcript in the order saved; ``[]`` if never saved.

        :raises TypeError, ValueError: a bad session id.
        :raises StoreError: the database failed, a stored row is not an encoded
            message, or the store is closed.
        """
        session = check_session_id(session)
        key = session.encode("utf-8")
        with self._operation("read of", session) as conn:
            # One read transaction: the version and the rows come from one snapshot,
            # so what is remembered is what was stored at that version.
            conn.execute("BEGIN")
            row = conn.execute(
                "SELECT id, version FROM storetest_sessions WHERE session = ?", (key,)
            ).fetchone()
            if row is None:
                conn.execute("COMMIT")
                return []
            # An application's connection may turn text into bytes or anything else; the
            # store reads its own rows as str, and leaves the setting as it found it.
            factory = conn.text_factory
            conn.text_factory = str
            # A read makes a few objects per row, none in a cycle: with the cyclic
            # collector paused they get one young pass when it resumes, not one every
            # 700 allocations and the older passes those set off. See gc_paused.
            with gc_paused():
                try:
                    rows = conn.execute(
                        "SELECT role, body, kind, call_id, name FROM storetest_messages "
                        "WHERE session_id = ? ORDER BY position",
                        (row[0],),
                    ).fetchall()
                    # Only the last chain digest (a save appending to what was read chains
                    # from it: see _incremental.Known), and only if the handle does not
                    # remember this version already.
                    remember = self._remembered.wants_read(key, row[1], len(rows))
                    last = conn.execute(
                        "SELECT digest FROM storetest_messages WHERE session_id = ? ORDER BY position DESC LIMIT 1",
                        (row[0],),
                    ).fetchone() if remember else None
                finally:
                    conn.text_factory = factory
                conn.execute("COMMIT")
                try:
                    # The store wrote these rows itself, from checked messages: the trusted
                    # constructors skip value checks they cannot fail.
                    result = [
                        trusted_text_message(role, body) if role is not None
                        else decode_trusted(body) if kind is None
                        else _ONE_PART[kind](call_id, name, body)
                        for role, body, kind, call_id, name in rows
                    ]
                except CodecError as exc:
                    raise StoreError(f"read of session {session!r} failed: {exc}") from exc
                except KeyError as exc:
                    raise StoreError(f"read of session {session!r} failed: a row of unknown kind {exc}") from None
                # The rows are dropped before the collector resumes, so its pass over
                # what the read made does not walk them too.
                del rows
            if remember:  # no last row: a session row with no messages (add_steer made it)
                self._remembered.learn_read(key, row[1], list(result), (last[0],) if last else (),
                                            max(len(result) - 1, 0))
            return result

    def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session.

        :raises TypeError, ValueError: a bad session id or steer text.
        :raises StoreError: the database failed or the store is closed.
        """
        session = check_session_id(session)
        text = check_steer_text(text)
        with self._operation("add_steer to", session) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO storetest_steers (session, text) VALUES (?, ?)",
                (session.encode("utf-8"), text.encode("utf-8")),
            )
            conn.execute("COMMIT")

    def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none.

        :raises TypeError, ValueError: a bad session id.
        :raises StoreError: the database failed (no steer is removed) or the store is
            closed.
        """
        session = check_session_id(session)
        key = session.encode("utf-8")
        with self._operation("take_steers from", session) as conn:
            # IMMEDIATE takes the write lock first; one DELETE ... RETURNING then removes
            # and returns the steers in one statement (it was a SELECT and a DELETE).
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "DELETE FROM storetest_steers WHERE session = ? RETURNING id, text", (key,)
            ).fetchall()
            conn.execute("COMMIT")
        # RETURNING order is undefined; ids were handed out in the order of the adds.
        rows.sort()
        return [bytes(text).decode("utf-8") for _, text in rows]

    # -- plumbing -----------------------------------------------------------------

    def _in_autocommit(self) -> bool:
        """Whether the connection is in autocommit mode (the store's own always is), where
        one statement is its own transaction. Read again under the lock before use."""
        try:
            return self._conn.isolation_level is None
        except sqlite3.ProgrammingError:
            return False  # closed: the operation says so

    def _operation(self, verb: str, session: str) -> _Operation:
        """``with self._operation("save to", session) as conn``: one operation under
        the store's lock, rolled back on any failure, a ``sqlite3`` error turned into
        ``StoreError("save to session 's' failed: ...")``."""
        return _Operation(self, verb, session)

    def _rollback_quietly(self) -> None:
        # The caller is already raising the error that matters; a rollback failing on
        # top of it (a closed or broken connection) is logged, never raised instead.
        try:
            if self._conn.in_transaction:
                self._conn.rollback()
        except sqlite3.Error:
            _log.warning("rollback failed on SQLite database %s", self._where, exc_info=True)


def _columns(message: Message, body: str) -> tuple[str | None, str, str | None, str | None, str | None]:
    """A message row's ``(role, body, kind, call_id, name)``. A message of one part, the
    common ones, is kept in columns and reads back with no JSON to parse: one text as
    its role and raw text in ``body``; one tool call or one tool result as ``kind`` (its
    role and the part's type: :data:`_ONE_PART`), its call id, the tool's name (a call)
    and its raw arguments or content in ``body``. Any other message is its
    :func:`~storetest.codec.encode_message` text, ``body``, and nothing else. ``role``
    is set for one text alone: a release before tool parts had columns reads the other
    rows as encoded messages, and fails on them, unless a tool's raw text happens to be
    the encoded JSON of a message."""
    content = message.content
    if len(content) == 1:
        part = content[0]
        kind = type(part)
        if kind is Text:
            return message.role, part.text, None, None, None  # type: ignore[union-attr]
        if kind is ToolCall:
            return None, part.arguments, f"{message.role} call", part.id, part.name  # type: ignore[union-attr]
        if kind is ToolResult:
            result = "error" if part.is_error else "result"  # type: ignore[union-attr]
            return None, part.content, f"{message.role} {result}", part.call_id, None  # type: ignore[union-attr]
    return None, body, None, None, None


def _one_part(role: str, kind: str) -> Callable[[str, str | None, str], Message]:
    if kind == "call":
        return lambda call_id, name, body: trusted_tool_call_message(role, call_id, name, body)  # type: ignore[arg-type]
    is_error = kind == "error"
    return lambda call_id, _, body: trusted_tool_result_message(role, call_id, body, is_error)


#: ``kind`` column value: what builds the message from ``(call_id, name, body)``.
_ONE_PART: Final = {f"{role} {kind}": _one_part(role, kind) for role in ROLES for kind in ("call", "result", "error")}


def _append_statement(rows: int) -> str:
    """The statement of :func:`_append` for this many rows."""
    if rows == 1:
        return (
            "INSERT INTO storetest_messages (session_id, position, digest, role, body, kind, call_id, name) "
            "SELECT id, ?, ?, ?, ?, ?, ?, ? FROM storetest_sessions WHERE session = ? AND version = ?"
        )
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows)
    return (
        "INSERT INTO storetest_messages (session_id, position, digest, role, body, kind, call_id, name) "
        "SELECT s.id, v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column7 "
        f"FROM (VALUES {values}) AS v, storetest_sessions AS s WHERE s.session = ? AND s.version = ?"
    )


_APPEND_STATEMENTS: Final = [""] + [_append_statement(n) for n in range(1, _APPEND_ROWS_MAX + 1)]


def _append(conn: sqlite3.Connection, key: bytes, after: Known, rows: list[tuple[int, bytes, str]]) -> bool:
    """Insert ``rows`` (``Remembered.plan_append``'s), which append to the rows stored at
    ``after.version``, in one statement on a connection in autocommit mode: its own
    transaction, fsynced as a ``COMMIT`` is. Whether it wrote them; it writes nothing if
    the version moved (rows were rewritten) or another handle appended meanwhile (the
    first position is taken: the primary key refuses the statement whole). The caller
    then saves as usual."""
    if len(rows) > _APPEND_ROWS_MAX:
        return False
    messages = after._messages
    if len(rows) == 1:  # the one message of an agent's turn
        ((position, digest, body),) = rows
        params: tuple[object, ...] = (position, digest, *_columns(messages[position], body), key, after.version)
    else:
        params = (*[x for p, d, b in rows for x in (p, d, *_columns(messages[p], b))], key, after.version)
    try:
        cursor = conn.execute(_APPEND_STATEMENTS[len(rows)], params)
    except sqlite3.IntegrityError:
        return False
    return cursor.rowcount == len(rows)


class _Operation:
    """What :meth:`SQLiteStore._operation` returns: a class rather than a
    ``@contextmanager`` generator, which is dearer to build and step, on every call."""

    __slots__ = ("_session", "_store", "_verb")

    def __init__(self, store: SQLiteStore, verb: str, session: str) -> None:
        self._store = store
        self._verb = verb
        self._session = session

    @property
    def _what(self) -> str:
        # Formatted only for an error, not on every call.
        return f"{self._verb} session {self._session!r}"

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        store._lock.acquire()
        try:
            if store._closed:
                raise StoreError(f"{self._what} failed: the store is closed")
            conn = store._conn
            if conn.in_transaction:
                if not store._owns_connection:
                    raise StoreError(
                        f"{self._what} failed: the connection is inside a transaction the "
                        "application opened; commit or roll back first"
                    )
                # Left over from a rollback that failed earlier: try again, or the
                # BEGIN that follows fails and the store stays unusable.
                store._rollback_quietly()
            return conn
        except BaseException:
            store._lock.release()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        store = self._store
        try:
            if exc is not None:
                store._rollback_quietly()
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"{self._what} failed: {exc}") from exc
        finally:
            store._lock.release()
