"""The SQLite log store: standard-library ``sqlite3``, one database file shared by every
handle, thread and process that opens it; tables created when opened.

How it keeps each SQLite fact that breaks naive log stores, and the log contract:

- *``JSON``/``STRING`` columns have NUMERIC affinity*: payloads are ``TEXT`` (JSON
  text from :mod:`reference_stores._entry_codec`, the custom JSON inside it as a
  string), session and entry ids ``BLOB`` of their UTF-8 bytes, so they compare with
  ``memcmp`` (no case, accent or trailing-space folding) and may hold NUL.
- *SQL functions stop at a NUL*: no SQL function touches a stored value.
- *A deferred transaction that reads then writes fails with "database is locked"*:
  appends and creates run in ``BEGIN IMMEDIATE`` (the write lock first, then the id
  checks, then the inserts) with a busy timeout, so checks and writes of two writers,
  in any threads or processes, never interleave, and a batch is one transaction (all
  or nothing, and no reader sees half of it).
- *Row order is unspecified without ``ORDER BY``*: entries are read ``ORDER BY seq``,
  a per-session sequence assigned in the writing transaction (never by time).
- *Appends must not cost O(log length)*: ids and parents are checked by primary-key
  lookups (``UNIQUE (session, id)``), and the next ``seq`` is ``max(seq) + 1`` from the
  ``(session, seq)`` key: O(log n) B-tree probes, nothing read in full.
- *Times*: microseconds since the epoch and the UTC offset, two integers.
- *A load*: rows are decoded as the store's own (:func:`~reference_stores._entry_codec.trusted_entry`,
  :func:`~storetest.codec.decode_trusted`, the cyclic collector paused); a payload that
  is not JSON of its kind's shape, or an unknown kind, is still refused as corrupt.

Durability: WAL mode with ``synchronous=FULL`` (the default, ``durable=True``): a
commit is on disk when ``append`` returns. ``durable=False`` uses ``synchronous=NORMAL``:
a process crash still loses nothing, a power cut may lose the last commits.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Final

from reference_stores._entry_codec import (
    decode_time,
    decode_trusted_payload,
    encode_payload,
    encode_time,
    gc_paused,
    trusted_entry,
)
from storetest.contract import StoreError, check_session_id
from storetest.entries import Entry, check_batch, check_create, check_entries

__all__ = ["BUSY_TIMEOUT_MS", "SCHEMA", "SQLiteLogStore"]

_log = logging.getLogger(__name__)

#: How long a write waits for another connection's write lock before failing.
BUSY_TIMEOUT_MS: Final = 30_000

#: The table the store creates when opened (idempotent).
SCHEMA: Final = """\
CREATE TABLE IF NOT EXISTS storetest_log_entries (
    session BLOB NOT NULL,
    seq INTEGER NOT NULL,
    id BLOB NOT NULL,
    parent_id BLOB,
    created_us INTEGER NOT NULL,
    utc_offset INTEGER NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (session, seq),
    UNIQUE (session, id)
);
"""

_ROWS = (
    "SELECT id, parent_id, created_us, utc_offset, kind, payload "
    "FROM storetest_log_entries WHERE session = ? ORDER BY seq"
)
_INSERT = (
    "INSERT INTO storetest_log_entries "
    "(session, seq, id, parent_id, created_us, utc_offset, kind, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class _Ids:
    """The session's entry ids, looked up one by one in the open transaction."""

    def __init__(self, conn: sqlite3.Connection, key: bytes) -> None:
        self.conn, self.key = conn, key

    def __contains__(self, entry_id: object) -> bool:
        assert isinstance(entry_id, str)
        return self.conn.execute(
            "SELECT 1 FROM storetest_log_entries WHERE session = ? AND id = ?",
            (self.key, entry_id.encode("utf-8")),
        ).fetchone() is not None


class SQLiteLogStore:
    """A log store (plain methods) in one SQLite database.

    Thread-safe: one connection, used under the store's lock. Stores on the same file
    (in this process or others) are replicas.

    :param path: the database file (created if missing).
    :param durable: ``synchronous=FULL`` (default) or ``NORMAL``; see the module docstring.
    :raises StoreError: the database cannot be opened or its table created.

    Methods raise ``TypeError``/``ValueError`` for bad arguments (``ValueError`` for a
    batch :func:`~storetest.entries.check_batch` refuses, with nothing written) and
    :class:`~storetest.contract.StoreError` when the database fails (after rolling back)
    or a stored row cannot be decoded, naming the operation and the session.
    """

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True) -> None:
        self._where = repr(os.fspath(path))
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"opening SQLite database {self._where} failed: {exc}") from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(SCHEMA)
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(f"setting up SQLite database {self._where} failed: {exc}") from exc

    def __repr__(self) -> str:
        return f"<SQLiteLogStore {self._where} ({'closed' if self._closed else 'open'})>"

    def __enter__(self) -> SQLiteLogStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection; closing twice is harmless, any later call raises ``StoreError``."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    # -- the contract -------------------------------------------------------------

    def append(self, session: str, entries: Sequence[Entry]) -> None:
        """Append a batch in one transaction, creating the session if new.

        :raises ValueError: a duplicate id or an unknown parent (nothing written).
        """
        session = check_session_id(session)
        batch = check_entries(entries)
        if not batch:
            return
        key = session.encode("utf-8")
        with self._operation(f"append to session {session!r}") as conn:
            conn.execute("BEGIN IMMEDIATE")
            check_batch(session, batch, _Ids(conn, key))
            self._insert(conn, key, batch)
            conn.execute("COMMIT")

    def entries(self, session: str) -> list[Entry]:
        """Every entry in append order; ``[]`` for a session never used."""
        session = check_session_id(session)
        try:
            # The rows are this store's own, written from checked entries: decoded
            # trusted, with the collector paused (see reference_stores._entry_codec).
            with self._operation(f"read of session {session!r}") as conn, gc_paused():
                rows = conn.execute(_ROWS, (session.encode("utf-8"),)).fetchall()
                return [
                    trusted_entry(id_.decode("utf-8"), None if parent is None else parent.decode("utf-8"),
                                  decode_time(us, offset), kind, decode_trusted_payload(kind, payload))
                    for id_, parent, us, offset, kind, payload in rows
                ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"read of session {session!r} failed: a stored entry is corrupt ({exc})") from exc

    def create(self, session: str, entries: Sequence[Entry]) -> bool:
        """Append a non-empty batch only if the session has no entries.

        :returns: ``True`` if written, ``False`` if the session already had entries.
        """
        session = check_session_id(session)
        batch = check_create(session, entries)
        key = session.encode("utf-8")
        with self._operation(f"create of session {session!r}") as conn:
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute("SELECT 1 FROM storetest_log_entries WHERE session = ? LIMIT 1", (key,)).fetchone():
                conn.execute("COMMIT")
                return False
            self._insert(conn, key, batch)
            conn.execute("COMMIT")
            return True

    # -- plumbing -----------------------------------------------------------------

    @staticmethod
    def _insert(conn: sqlite3.Connection, key: bytes, batch: Sequence[Entry]) -> None:
        (last,) = conn.execute(
            "SELECT max(seq) FROM storetest_log_entries WHERE session = ?", (key,)
        ).fetchone()
        first = 0 if last is None else last + 1
        conn.executemany(_INSERT, (
            (key, first + i, e.id.encode("utf-8"), None if e.parent_id is None else e.parent_id.encode("utf-8"),
             *encode_time(e.created_at), e.kind, encode_payload(e))
            for i, e in enumerate(batch)
        ))

    @contextmanager
    def _operation(self, what: str) -> Iterator[sqlite3.Connection]:
        """Hold the lock for one operation; on any failure roll back, and turn a
        ``sqlite3`` error into ``StoreError("<what> failed: ...")``."""
        with self._lock:
            if self._closed:
                raise StoreError(f"{what} failed: the store is closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                self._rollback_quietly()
                raise StoreError(f"{what} failed: {exc}") from exc
            except BaseException:
                self._rollback_quietly()
                raise

    def _rollback_quietly(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.rollback()
        except sqlite3.Error:
            _log.warning("rollback failed on SQLite database %s", self._where, exc_info=True)
