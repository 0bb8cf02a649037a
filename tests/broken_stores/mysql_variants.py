"""Broken MariaDB/MySQL stores, on the real throwaway server from ``storetest_mysql_url``.

:class:`PlainMariaDBStore` is the reference store's design without its incremental
saves: one transaction per operation, adders and takers queued on the session's row
lock, every read ordered. It is correct as written (the control test runs it); each
variant changes one thing, usually one line of the DDL. Each factory creates a
database of its own (``broken_<random>``) on the server, with the fixture's
credentials, and drops it afterwards.

Connections come from a per-thread cache, as from a pool: the suite drives a
synchronous store from many threads at once.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pymysql

from storetest.codec import decode_message, encode_message
from storetest.contract import (
    Message,
    Text,
    check_messages,
    check_session_id,
    check_steer_text,
)
from storetest.databases import mysql_connection as connect
from tests.broken_stores import BrokenStore

_RETRYABLE = frozenset({1213, 1205})  # deadlock, lock wait timeout


class PlainMariaDBStore:
    """A message that is one ``Text`` part keeps its text in ``text``; any other is
    encoded JSON in ``parts``. Session ids are the UTF-8 bytes in ``VARBINARY``."""

    #: Column type of session ids, and whether the store passes them as bytes.
    SESSION: ClassVar[str] = "VARBINARY(512)"
    SESSION_AS_BYTES: ClassVar[bool] = True
    #: Column type of plain message text, and the tables' default character set.
    TEXT: ClassVar[str] = "LONGTEXT"
    CHARSET: ClassVar[str] = "utf8mb4"
    #: ``None`` keeps the server's (strict) sql_mode.
    SQL_MODE: ClassVar[str | None] = None

    @classmethod
    def schema(cls) -> list[str]:
        session, charset = cls.SESSION, cls.CHARSET
        return [
            f"CREATE TABLE b_sessions (session {session} NOT NULL PRIMARY KEY) "
            f"ENGINE=InnoDB DEFAULT CHARSET={charset}",
            f"CREATE TABLE b_messages (session {session} NOT NULL, position INT NOT NULL, "
            f"role VARCHAR(16) NOT NULL, text {cls.TEXT} NULL, parts LONGTEXT NULL, "
            f"PRIMARY KEY (session, position)) ENGINE=InnoDB DEFAULT CHARSET={charset}",
            f"CREATE TABLE b_steers (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
            f"session {session} NOT NULL, text LONGBLOB NOT NULL, KEY (session, id)) "
            f"ENGINE=InnoDB DEFAULT CHARSET={charset}",
        ]

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._all: list[Any] = []
        self._guard = threading.Lock()

    def close(self) -> None:
        for conn in self._all:
            conn.close()

    def _key(self, session: str) -> Any:
        session = check_session_id(session)
        return session.encode("utf-8") if self.SESSION_AS_BYTES else session

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            with conn.cursor() as cur:
                if self.SQL_MODE is not None:
                    cur.execute("SET SESSION sql_mode = %s", (self.SQL_MODE,))
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            with self._guard:
                self._all.append(conn)
        return conn

    def _transaction(self, work: Callable[[Any], Any]) -> Any:
        conn = self._conn()
        for attempt in range(8):
            try:
                conn.begin()
                with conn.cursor() as cur:
                    result = work(cur)
                conn.commit()
                return result
            except pymysql.err.MySQLError as exc:
                conn.rollback()
                if exc.args and exc.args[0] in _RETRYABLE and attempt < 7:
                    continue
                raise
            except BaseException:
                conn.rollback()
                raise
        raise AssertionError("unreachable")

    # -- the contract -------------------------------------------------------------------

    def save(self, session: str, messages: Sequence[Message]) -> None:
        key = self._key(session)
        new = check_messages(messages)
        rows = []
        for i, m in enumerate(new):
            if len(m.content) == 1 and isinstance(m.content[0], Text):
                rows.append((key, i, m.role, m.content[0].text, None))
            else:
                rows.append((key, i, m.role, None, encode_message(m)))

        def write(cur: Any) -> None:
            cur.execute("INSERT INTO b_sessions (session) VALUES (%s) "
                        "ON DUPLICATE KEY UPDATE session = session", (key,))
            cur.execute("DELETE FROM b_messages WHERE session = %s", (key,))
            if rows:
                cur.executemany("INSERT INTO b_messages (session, position, role, text, parts) "
                                "VALUES (%s, %s, %s, %s, %s)", rows)

        self._transaction(write)

    def messages(self, session: str) -> list[Message]:
        key = self._key(session)

        def read(cur: Any) -> list[Message]:
            cur.execute("SELECT role, text, parts FROM b_messages WHERE session = %s "
                        "ORDER BY position", (key,))
            return [
                Message(role, (Text(text),)) if parts is None else decode_message(parts)
                for role, text, parts in cur.fetchall()
            ]

        return self._transaction(read)  # type: ignore[no-any-return]

    def add_steer(self, session: str, text: str) -> None:
        key = self._key(session)
        data = check_steer_text(text).encode("utf-8")

        def write(cur: Any) -> None:
            cur.execute("INSERT INTO b_sessions (session) VALUES (%s) "
                        "ON DUPLICATE KEY UPDATE session = session", (key,))
            cur.execute("INSERT INTO b_steers (session, text) VALUES (%s, %s)", (key, data))

        self._transaction(write)

    def take_steers(self, session: str) -> list[str]:
        key = self._key(session)

        def take(cur: Any) -> list[tuple[int, bytes]]:
            cur.execute("SELECT 1 FROM b_sessions WHERE session = %s FOR UPDATE", (key,))
            if cur.fetchone() is None:
                return []
            cur.execute("SELECT id, text FROM b_steers WHERE session = %s ORDER BY id FOR UPDATE",
                        (key,))
            rows = list(cur.fetchall())
            if rows:
                marks = ", ".join(["%s"] * len(rows))
                cur.execute(f"DELETE FROM b_steers WHERE id IN ({marks})", [r[0] for r in rows])
            return rows

        return [bytes(text).decode("utf-8") for _, text in self._transaction(take)]


class GeneralCiSessionStore(PlainMariaDBStore):
    """Session ids in ``VARCHAR(512) COLLATE utf8mb4_general_ci``: ``'a' = 'A'``,
    ``'e' = 'é'``, and (PAD SPACE) ``'a' = 'a '``, so those sessions share one row.

    In the wild: the server's default collation for any ``VARCHAR`` id column
    (``utf8mb4_general_ci`` on MariaDB, ``utf8mb4_0900_ai_ci`` on MySQL 8), which is
    what an ORM's ``String(512)`` creates.
    """

    SESSION = "VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
    SESSION_AS_BYTES = False


class PadSpaceBinSessionStore(PlainMariaDBStore):
    """Session ids in ``VARCHAR(512) COLLATE utf8mb4_bin``: case- and accent-exact, but a
    PAD SPACE collation, so ``'a' = 'a '`` and those sessions share one row.

    In the wild: the usual "fix" for case-insensitive ids (switch to ``utf8mb4_bin``);
    only ``VARBINARY`` or a NO PAD collation (``utf8mb4_0900_bin``, ``*_nopad_bin``)
    compares trailing spaces.
    """

    SESSION = "VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    SESSION_AS_BYTES = False


class TextColumnStore(PlainMariaDBStore):
    """Message text in a ``TEXT`` column (65,535 bytes) on a connection outside strict
    mode, so a longer message is cut with only a warning.

    In the wild: ``TEXT`` from an ORM's ``Text`` type (SQLAlchemy, Django ``TextField``
    on MySQL), with ``sql_mode`` cleared for legacy compatibility or on servers whose
    default is not strict (MySQL 5.6, some managed services). In strict mode the same
    column fails the save with "Data too long" instead.
    """

    TEXT = "TEXT"
    SQL_MODE = ""


class Utf8mb3Store(PlainMariaDBStore):
    """Tables in ``utf8`` (= ``utf8mb3``, three bytes a character) outside strict mode:
    every emoji or other 4-byte character is stored as ``?``.

    In the wild: MySQL's ``utf8`` alias, old schemas and ``CREATE DATABASE`` defaults;
    in strict mode the save fails with "Incorrect string value" instead.
    """

    CHARSET = "utf8mb3"
    SQL_MODE = ""


class UnlockedTakeStore(PlainMariaDBStore):
    """``take_steers`` reads the steers with a plain (non-locking) ``SELECT`` and then
    deletes them by id: two takers read the same steers before either deletes.

    In the wild: the take written without ``SELECT ... FOR UPDATE`` (or ``SKIP LOCKED``),
    relying on the transaction alone; InnoDB's consistent reads take no locks.
    """

    def take_steers(self, session: str) -> list[str]:
        key = self._key(session)

        def take(cur: Any) -> list[tuple[int, bytes]]:
            cur.execute("SELECT id, text FROM b_steers WHERE session = %s ORDER BY id", (key,))
            rows = list(cur.fetchall())
            if rows:
                marks = ", ".join(["%s"] * len(rows))
                cur.execute(f"DELETE FROM b_steers WHERE id IN ({marks})", [r[0] for r in rows])
            return rows

        return [bytes(text).decode("utf-8") for _, text in self._transaction(take)]


def _in_fresh_database(url: str, cls: type[PlainMariaDBStore]) -> Iterator[PlainMariaDBStore]:
    name = f"broken_{secrets.token_hex(5)}"
    parts = urlsplit(url)
    server = parts._replace(path="/").geturl()
    database = parts._replace(path=f"/{name}").geturl()
    admin = connect(server, autocommit=True)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        setup = connect(database, autocommit=True)
        try:
            with setup.cursor() as cur:
                for statement in cls.schema():
                    cur.execute(statement)
        finally:
            setup.close()
        store = cls(lambda: connect(database))
        try:
            yield store
        finally:
            store.close()
    finally:
        try:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            admin.close()


def _factory(cls: type[PlainMariaDBStore]) -> Callable[[str], Iterator[PlainMariaDBStore]]:
    def factory(storetest_mysql_url: str) -> Iterator[PlainMariaDBStore]:
        yield from _in_fresh_database(storetest_mysql_url, cls)

    factory.__name__ = factory.__qualname__ = f"make_{cls.__name__}"
    factory.__doc__ = cls.__doc__
    return factory


plain_store = _factory(PlainMariaDBStore)

BROKEN: list[BrokenStore] = [
    BrokenStore(
        "mariadb-session-general-ci",
        "session ids in VARCHAR utf8mb4_general_ci: case, accents, trailing spaces folded",
        "the default collation of any VARCHAR id column (an ORM's String(n))",
        "sessions_are_isolated", "ids that differ only by",
        _factory(GeneralCiSessionStore),
    ),
    BrokenStore(
        "mariadb-session-pad-space-bin",
        "session ids in VARCHAR utf8mb4_bin: a PAD SPACE collation, 'a' = 'a '",
        "the usual fix for case-insensitive ids; only VARBINARY or NO PAD is exact",
        "sessions_are_isolated", "differ only by trailing spaces",
        _factory(PadSpaceBinSessionStore),
    ),
    BrokenStore(
        "mariadb-text-column",
        "message text in TEXT (64 KiB), non-strict sql_mode: cut silently",
        "an ORM's Text type on MySQL with sql_mode cleared or not strict",
        "every_field_round_trips_at_every_size", "cut at 65535 bytes mid-character",
        _factory(TextColumnStore),
    ),
    BrokenStore(
        "mariadb-utf8mb3",
        "tables in utf8 (utf8mb3), non-strict: 4-byte characters become '?'",
        "MySQL's utf8 alias in old schemas and database defaults",
        "transcript_round_trips_exactly", "Basic Multilingual Plane replaced by '?'",
        _factory(Utf8mb3Store),
    ),
    BrokenStore(
        "mariadb-unlocked-take",
        "take SELECTs without FOR UPDATE, then DELETEs by id",
        "takes relying on the transaction alone; InnoDB consistent reads lock nothing",
        "steers_are_taken_exactly_once_under_concurrency", "duplicated",
        _factory(UnlockedTakeStore), racy=True,
    ),
]
