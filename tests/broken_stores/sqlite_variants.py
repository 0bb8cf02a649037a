"""Broken variants of the SQLite reference store (:mod:`reference_stores.sqlite`), each
on a real database file under ``tmp_path``.

Each keeps the reference's transcripts and replaces its steer table and the two steer
methods with one carrying the bug.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

from reference_stores.sqlite import SQLiteStore
from storetest.contract import check_session_id, check_steer_text
from tests.broken_stores import BrokenStore


class JsonSteerColumnStore(SQLiteStore):
    """Steer text kept in a column declared ``JSON``, which SQLite gives NUMERIC affinity:
    the steer ``'1.0'`` comes back as the integer ``1`` (``'10'`` as ``10``).

    In the wild: schemas written for Postgres/MySQL (``payload JSON``) run unchanged
    on SQLite, ORMs mapping a JSON type to a ``JSON`` column there; ``STRING`` and
    ``NUMERIC`` columns do the same.
    """

    def _setup(self) -> None:
        super()._setup()
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS broken_steers "
            "(id INTEGER PRIMARY KEY AUTOINCREMENT, session BLOB NOT NULL, text JSON NOT NULL)"
        )

    def add_steer(self, session: str, text: str) -> None:
        session = check_session_id(session)
        text = check_steer_text(text)
        with self._operation("add_steer to", session) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO broken_steers (session, text) VALUES (?, ?)",
                         (session.encode("utf-8"), text))
            conn.execute("COMMIT")

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        key = session.encode("utf-8")
        with self._operation("take_steers from", session) as conn:
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "SELECT id, text FROM broken_steers WHERE session = ? ORDER BY id", (key,)
            ).fetchall()
            conn.execute("DELETE FROM broken_steers WHERE session = ?", (key,))
            conn.execute("COMMIT")
            return [text for _, text in rows]


class TiedTimestampStore(JsonSteerColumnStore):
    """Steers ordered by a creation time with one-second resolution; ties (every steer
    added within the same second) come back in the order of the table's primary key,
    a random UUID.

    In the wild: ``ORDER BY created_at`` with ``CURRENT_TIMESTAMP`` (seconds in SQLite
    and MySQL ``DATETIME``), ``Date.now()`` millisecond keys, UUIDv4 primary keys;
    any sort whose key ties, leaving the secondary order to the engine.
    """

    def _setup(self) -> None:
        SQLiteStore._setup(self)
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS broken_timed_steers (id TEXT PRIMARY KEY, "
            "session BLOB NOT NULL, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, "
            "text BLOB NOT NULL) WITHOUT ROWID"
        )
        self._conn.execute(
            "CREATE INDEX IF NOT EXISTS broken_timed_steers_by_time "
            "ON broken_timed_steers (session, created_at)"
        )

    def add_steer(self, session: str, text: str) -> None:
        session = check_session_id(session)
        data = check_steer_text(text).encode("utf-8")
        with self._operation("add_steer to", session) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO broken_timed_steers (id, session, text) VALUES (?, ?, ?)",
                         (str(uuid.uuid4()), session.encode("utf-8"), data))
            conn.execute("COMMIT")

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        key = session.encode("utf-8")
        with self._operation("take_steers from", session) as conn:
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "SELECT text FROM broken_timed_steers WHERE session = ? ORDER BY created_at",
                (key,),
            ).fetchall()
            conn.execute("DELETE FROM broken_timed_steers WHERE session = ?", (key,))
            conn.execute("COMMIT")
            return [bytes(text).decode("utf-8") for (text,) in rows]


class DeferredTakeStore(SQLiteStore):
    """The reference's take without ``BEGIN IMMEDIATE`` and its lock: a deferred
    transaction reads the steers, and the delete comes in a second transaction.

    In the wild: Python's ``sqlite3`` default (deferred) transactions, ``SELECT`` then
    ``DELETE`` through an ORM session with autocommit; here the store also releases
    its own lock between the two, as a store with one connection per thread would.
    """

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        key = session.encode("utf-8")
        with self._operation("take_steers from", session) as conn:
            rows = conn.execute(
                "SELECT id, text FROM storetest_steers WHERE session = ? ORDER BY id", (key,)
            ).fetchall()
        if not rows:
            return []
        with self._operation("take_steers from", session) as conn:
            conn.executemany("DELETE FROM storetest_steers WHERE id = ?", [(r[0],) for r in rows])
        return [bytes(text).decode("utf-8") for _, text in rows]


def _file(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"{name}-{uuid.uuid4().hex[:8]}.db"


def json_steer_column_store(tmp_path: Path) -> Iterator[JsonSteerColumnStore]:
    with JsonSteerColumnStore(_file(tmp_path, "json-steers")) as store:
        yield store


def tied_timestamp_store(tmp_path: Path) -> Iterator[TiedTimestampStore]:
    with TiedTimestampStore(_file(tmp_path, "tied")) as store:
        yield store


def deferred_take_store(tmp_path: Path) -> Iterator[DeferredTakeStore]:
    with DeferredTakeStore(_file(tmp_path, "deferred")) as store:
        yield store


BROKEN: list[BrokenStore] = [
    BrokenStore(
        "sqlite-json-steer-column",
        "steer text in a column declared JSON: NUMERIC affinity turns '1.0' into 1",
        "Postgres/MySQL schemas (payload JSON) run on SQLite; ORMs' JSON type on SQLite",
        "steers_are_taken_in_order_exactly_once", "numeric affinity",
        json_steer_column_store,
    ),
    BrokenStore(
        "sqlite-steers-tied-timestamp",
        "steers ORDER BY a one-second created_at; ties come back in UUID order",
        "ORDER BY created_at with CURRENT_TIMESTAMP / DATETIME; UUIDv4 primary keys",
        "steers_are_taken_in_order_exactly_once", "steers out of order",
        tied_timestamp_store,
    ),
    BrokenStore(
        "sqlite-deferred-take",
        "take SELECTs, then DELETEs in a second transaction, with no lock between",
        "sqlite3's default deferred transactions; SELECT then DELETE through an ORM",
        "steers_are_taken_exactly_once_under_concurrency", "duplicated",
        deferred_take_store, racy=True,
    ),
]
