"""What the MySQL/MariaDB store and its provisioning promise beyond the shared suite:
idempotent DDL, least privilege, errors that name the session, exact session ids and
steers, values past ``TEXT``'s 64 KiB, incremental saves, both ways of handing it
connections, lost connections and packet limits, and where throwaway databases come
from."""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from storetest._engine import servers
from storetest.contract import Attachment, Message, OutcomeUnknown, StoreError, Text, ToolCall
from tests.faults.proxy import MYSQL_COMMIT, CuttingProxy
from tests.wire import RoundTrips

pytest.importorskip("pymysql")

import pymysql

from reference_stores import mysql as mysql_store
from reference_stores.mysql import SCHEMA, MySQLStore
from storetest._engine.servers import mysql as provisioning
from storetest._engine.servers.mysql import connect

pytest_plugins = ["pytester"]


def _server_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/", "", ""))


def _with_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{user}:{password}@{host}", parts.path, "", ""))


def _apply_schema(url: str) -> None:
    with closing(connect(url)) as conn, conn.cursor() as cur:
        for statement in SCHEMA:
            cur.execute(statement)
        conn.commit()


def _query(url: str, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    """Read the backend directly, not through the store under test."""
    with closing(connect(url, autocommit=True)) as conn, conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


@pytest.fixture
def db(storetest_mysql_url: str) -> Iterator[str]:
    """A database of this test's own on the run's server, with the store's tables."""
    name = f"storetest_t_{secrets.token_hex(5)}"
    server = _server_url(storetest_mysql_url)
    _query(server, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    url = urlunsplit((*urlsplit(server)[:2], f"/{name}", "", ""))
    try:
        _apply_schema(url)
        yield url
    finally:
        _query(server, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(params=["factory", "shared-connection"])
def make_store(request: pytest.FixtureRequest, db: str) -> Iterator[Callable[[], MySQLStore]]:
    """Makes store handles on ``db`` either way an application can give connections."""
    opened: list[Any] = []

    def make() -> MySQLStore:
        if request.param == "factory":
            return MySQLStore(lambda: connect(db))
        conn = connect(db)
        opened.append(conn)
        return MySQLStore(conn)

    yield make
    for conn in opened:
        conn.close()


def _texts(n: int, label: str = "m") -> list[Message]:
    return [Message.text("user" if i % 2 else "assistant", f"{label} {i}") for i in range(n)]


def _stored_count(db: str, session: str) -> int:
    rows = _query(db, "SELECT COUNT(*) FROM agent_messages WHERE session = %s", (session.encode(),))
    return int(rows[0][0])


# -- schema and privileges ----------------------------------------------------------------


def test_schema_applies_twice_and_declares_exact_types(db: str) -> None:
    """Every SCHEMA statement runs again without error, and the columns are the ones the
    design needs: binary session ids, LONGTEXT/LONGBLOB values, utf8mb4 tables, no JSON."""
    _apply_schema(db)
    _apply_schema(db)
    name = urlsplit(db).path.lstrip("/")
    columns = dict(
        ((table, column), (kind, charset))
        for table, column, kind, charset in _query(
            db,
            "SELECT table_name, column_name, column_type, character_set_name "
            "FROM information_schema.columns WHERE table_schema = %s "
            "ORDER BY table_name, ordinal_position",
            (name,),
        )
    )
    for table in ("agent_sessions", "agent_messages", "agent_steers"):
        assert columns[(table, "session")][0] == "varbinary(512)", table
    assert columns[("agent_messages", "body")] == ("longtext", "utf8mb4")
    assert columns[("agent_steers", "text")][0] == "longblob"
    assert not [key for key, (kind, _) in columns.items() if kind == "json"]
    tables = _query(
        db,
        "SELECT table_name, table_collation FROM information_schema.tables "
        "WHERE table_schema = %s ORDER BY table_name",
        (name,),
    )
    assert [t for t, _ in tables] == ["agent_messages", "agent_sessions", "agent_steers"]
    assert all(collation.startswith("utf8mb4") for _, collation in tables), tables


def test_a_user_with_only_dml_rights_can_use_the_store(db: str) -> None:
    """The runtime user needs SELECT/INSERT/UPDATE/DELETE on the tables and nothing else."""
    user, password = f"st_dml_{secrets.token_hex(4)}", secrets.token_hex(8)
    name = urlsplit(db).path.lstrip("/")
    try:
        _query(db, f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s", (password,))
        _query(db, f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{name}`.* TO '{user}'@'%'")
    except pymysql.err.OperationalError as exc:
        pytest.skip(f"the test server's user may not create users: {exc}")
    try:
        url = _with_user(db, user, password)
        with closing(connect(url)) as conn:
            with conn.cursor() as cur, pytest.raises(pymysql.err.OperationalError):
                cur.execute("CREATE TABLE proof_of_least_privilege (x INT)")
            store = MySQLStore(conn)
            messages = _texts(3)
            store.save("s", messages)
            store.save("s", [*messages, Message.text("user", "more")])
            assert store.messages("s") == [*messages, Message.text("user", "more")]
            store.add_steer("s", "left")
            assert store.take_steers("s") == ["left"]
            assert store.take_steers("s") == []
    finally:
        _query(db, f"DROP USER IF EXISTS '{user}'@'%'")


# -- errors -------------------------------------------------------------------------------


def test_a_closed_connection_raises_store_error_naming_the_session(db: str) -> None:
    conn = connect(db)
    store = MySQLStore(conn)
    store.save("kept", _texts(2))
    conn.close()
    with pytest.raises(StoreError, match=r"^save to session 'kept' failed: ") as info:
        store.save("kept", _texts(5, "new"))
    assert isinstance(info.value.__cause__, pymysql.err.Error)
    with pytest.raises(StoreError, match=r"^messages of session 'kept' failed: "):
        store.messages("kept")
    with pytest.raises(StoreError, match=r"^add_steer to session 'kept' failed: "):
        store.add_steer("kept", "x")
    with pytest.raises(StoreError, match=r"^take_steers from session 'kept' failed: "):
        store.take_steers("kept")
    assert MySQLStore(lambda: connect(db)).messages("kept") == _texts(2)


class _DyingConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """A real connection that drops its socket when the statement bumping the version
    is sent: the rows of the new tail are already written, uncommitted."""

    def query(self, sql: Any, unbuffered: bool = False) -> int:
        text = bytes(sql).decode() if isinstance(sql, (bytes, bytearray)) else sql
        if text.startswith("UPDATE agent_sessions"):
            self._force_close()
        return int(super().query(sql, unbuffered))


def test_a_connection_lost_mid_save_leaves_the_old_transcript(db: str) -> None:
    """Nothing half-written: the tail inserted before the failure is rolled back."""
    reader = MySQLStore(lambda: connect(db))
    old = _texts(3)
    reader.save("torn?", old)
    parts = urlsplit(db)
    dying = _DyingConnection(
        host=parts.hostname,
        port=parts.port,
        user=parts.username,
        password=parts.password,
        database=parts.path.lstrip("/"),
        charset="utf8mb4",
        ssl_disabled=True,
        read_timeout=30,
        write_timeout=30,
    )
    store = MySQLStore(dying)
    with pytest.raises(StoreError, match=r"^save to session 'torn\?' failed: "):
        store.save("torn?", [*old[:1], *_texts(4, "new")])
    assert reader.messages("torn?") == old
    assert _stored_count(db, "torn?") == 3


def test_a_factory_that_cannot_connect_raises_store_error(db: str) -> None:
    parts = urlsplit(db)
    wrong = urlunsplit((parts.scheme, f"nobody:wrong@{parts.hostname}:{parts.port}", "/", "", ""))
    store = MySQLStore(lambda: connect(wrong))
    with pytest.raises(StoreError, match=r"^take_steers from session 'x' failed: ") as info:
        store.take_steers("x")
    assert isinstance(info.value.__cause__, pymysql.err.OperationalError)


def test_missing_tables_say_to_apply_the_schema(storetest_mysql_url: str) -> None:
    server = _server_url(storetest_mysql_url)
    name = f"storetest_empty_{secrets.token_hex(4)}"
    _query(server, f"CREATE DATABASE `{name}`")
    try:
        url = urlunsplit((*urlsplit(server)[:2], f"/{name}", "", ""))
        store = MySQLStore(lambda: connect(url))
        with pytest.raises(StoreError, match=r"messages of session 's' failed: .*SCHEMA"):
            store.messages("s")
    finally:
        _query(server, f"DROP DATABASE IF EXISTS `{name}`")


def test_bad_arguments_are_refused_before_the_database(db: str) -> None:
    """Validation comes first: a closed connection still gives TypeError/ValueError."""
    conn = connect(db)
    conn.close()
    store = MySQLStore(conn)
    with pytest.raises(ValueError):
        store.save("", [])
    with pytest.raises(TypeError):
        store.save("s", ["not a message"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        store.add_steer("s", "\ud800")
    with pytest.raises(ValueError):
        store.take_steers("x" * 513)
    with pytest.raises(TypeError, match="never takes a DSN"):
        MySQLStore(db)


# -- exact values -------------------------------------------------------------------------


def test_session_ids_compare_byte_for_byte(make_store: Callable[[], MySQLStore]) -> None:
    """Case, trailing spaces and Unicode normalization all make different sessions."""
    store = make_store()
    ids = ["a", "A", "a ", "\u00e9", "e\u0301", "a\x00"]
    for sid in ids:
        store.save(sid, [Message.text("user", f"for {sid!r}")])
        store.add_steer(sid, f"steer {sid!r}")
    for sid in ids:
        assert store.messages(sid) == [Message.text("user", f"for {sid!r}")], sid
        assert store.take_steers(sid) == [f"steer {sid!r}"], sid


def test_emoji_nul_crlf_and_trailing_spaces_in_steers_round_trip(db: str) -> None:
    store = MySQLStore(lambda: connect(db))
    steers = [
        "\U0001f600 \U0001f9d1\u200d\U0001f4bb",
        "a\x00b\x00",
        "line\r\nnext\r\n",
        "tail  ",
        "",
    ]
    for text in steers:
        store.add_steer("s", text)
    assert store.take_steers("s") == steers
    store.add_steer("s", steers[0])
    raw = _query(db, "SELECT text FROM agent_steers WHERE session = %s ORDER BY id", (b"s",))
    assert [bytes(r[0]) for r in raw] == [steers[0].encode("utf-8")]


@pytest.mark.parametrize("size", [64 * 1024 + 1, 1024 * 1024])
def test_messages_beyond_text_limits_round_trip(db: str, size: int) -> None:
    """TEXT stops at 65,535 bytes; a message of 64 KiB + 1 and one of 1 MiB come back whole."""
    store = MySQLStore(lambda: connect(db))
    big = [
        Message.text("user", "\U0001f600" * (size // 4)),
        Message("assistant", (ToolCall("c", "f", '{"x": "' + "y" * size + '"}'),)),
        Message(
            "user",
            (Attachment("application/octet-stream", bytes(range(256)) * (size // 256)),),
        ),
    ]
    store.save("big", big)
    assert MySQLStore(lambda: connect(db)).messages("big") == big


def test_a_connection_in_another_charset_is_switched_to_utf8mb4(db: str) -> None:
    with closing(connect(db, charset="latin1")) as conn:
        store = MySQLStore(conn)
        store.save("s", [Message.text("user", "\U0001f600 caf\u00e9")])
        store.add_steer("s", "\U0001f600")
        assert store.messages("s") == [Message.text("user", "\U0001f600 caf\u00e9")]
        assert store.take_steers("s") == ["\U0001f600"]


def test_a_connection_with_dict_rows_and_autocommit_on_works(db: str) -> None:
    with closing(connect(db, cursorclass=pymysql.cursors.DictCursor, autocommit=True)) as conn:
        store = MySQLStore(conn)
        store.save("s", _texts(3))
        assert store.messages("s") == _texts(3)
        store.add_steer("s", "x")
        assert store.take_steers("s") == ["x"]


def test_an_autocommit_off_connection_sees_other_handles_writes(db: str) -> None:
    """Each operation ends its transaction, so no REPEATABLE READ snapshot goes stale."""
    with closing(connect(db, autocommit=False)) as conn:
        mine, theirs = MySQLStore(conn), MySQLStore(lambda: connect(db))
        assert mine.messages("s") == []
        assert mine.take_steers("s") == []
        theirs.save("s", _texts(2))
        theirs.add_steer("s", "new")
        assert mine.messages("s") == _texts(2)
        assert mine.take_steers("s") == ["new"]


def test_a_transaction_the_application_left_open_does_not_break_the_store(db: str) -> None:
    """With autocommit off, the application's own SELECT opens a transaction; the store
    must still be able to start its own (MySQL refuses SET TRANSACTION inside one)."""
    with closing(connect(db, autocommit=False)) as conn:
        store = MySQLStore(conn)
        for operation in (
            lambda: store.save("s", _texts(2)),
            lambda: store.add_steer("s", "x"),
            lambda: store.take_steers("s"),
            lambda: store.messages("s"),
        ):
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM agent_sessions")
                cur.fetchall()
            operation()
    assert MySQLStore(lambda: connect(db)).messages("s") == _texts(2)


# -- incremental saves --------------------------------------------------------------------


def _handler_counts(conn: Any) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Handler_%%'")
        counts = {name: int(value) for name, value in cur.fetchall()}
    conn.commit()
    return counts


def test_saves_rewrite_only_what_changed(db: str) -> None:
    """Appending one message to 200 writes one row; changing the last rewrites one."""
    with closing(connect(db)) as conn:
        store = MySQLStore(conn)
        transcript = _texts(200)
        store.save("s", transcript)
        before = _handler_counts(conn)
        store.save("s", [*transcript, Message.text("user", "one more")])
        after = _handler_counts(conn)
        assert after["Handler_write"] - before["Handler_write"] == 1
        assert after["Handler_delete"] - before["Handler_delete"] == 0
        before = after
        store.save("s", [*transcript, Message.text("user", "changed")])
        after = _handler_counts(conn)
        assert after["Handler_write"] - before["Handler_write"] == 1
        assert after["Handler_delete"] - before["Handler_delete"] == 1
    assert MySQLStore(lambda: connect(db)).messages("s") == [
        *transcript,
        Message.text("user", "changed"),
    ]


def test_a_handle_that_missed_another_handles_save_falls_back_to_digests(db: str) -> None:
    """A stale memory is never trusted: the version check sends it to the stored digests."""
    with closing(connect(db)) as conn:
        stale = MySQLStore(conn)
        other = MySQLStore(lambda: connect(db))
        base = _texts(50)
        stale.save("s", base)
        other.save("s", [*base[:10], Message.text("user", "theirs")])
        mine = [*base, Message.text("user", "mine")]
        before = _handler_counts(conn)
        stale.save("s", mine)
        after = _handler_counts(conn)
        # The common prefix with what is stored now is 10 messages: the other 41 are written.
        assert after["Handler_write"] - before["Handler_write"] == 41
    assert other.messages("s") == mine
    other.save("s", [*mine, Message.text("user", "again")])
    assert MySQLStore(lambda: connect(db)).messages("s") == [*mine, Message.text("user", "again")]


def test_rows_changed_behind_the_stores_back_are_seen_on_read(db: str) -> None:
    """A read whose version matches serves from memory; a save elsewhere changes the version."""
    store = MySQLStore(lambda: connect(db))
    store.save("s", _texts(3))
    assert store.messages("s") == _texts(3)
    MySQLStore(lambda: connect(db)).save("s", _texts(2, "other"))
    assert store.messages("s") == _texts(2, "other")


# -- both connection modes under threads --------------------------------------------------


@pytest.fixture(params=["server's own take", "take without RETURNING"])
def take_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test as the server's take (``DELETE ... RETURNING`` on MariaDB), then as
    the take MySQL gets (``SELECT ... FOR UPDATE``, then ``DELETE`` by id)."""
    if request.param == "take without RETURNING":
        monkeypatch.setattr(mysql_store, "_deletes_returning", lambda conn: False)
    return str(request.param)


@pytest.mark.usefixtures("take_path")
def test_concurrent_takers_on_one_handle_and_a_replica_take_each_steer_once_in_order(
    make_store: Callable[[], MySQLStore],
) -> None:
    primary, replica = make_store(), make_store()
    added = [f"steer {i}" for i in range(120)]
    takes: list[list[str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    done = threading.Event()

    def take(store: MySQLStore) -> None:
        try:
            while not done.is_set():
                got = store.take_steers("q")
                with lock:
                    takes.append(got)
        except BaseException as exc:
            errors.append(exc)

    def add() -> None:
        try:
            for i, text in enumerate(added):
                (primary if i % 2 else replica).add_steer("q", text)
        finally:
            done.set()

    threads = [threading.Thread(target=add)]
    threads += [threading.Thread(target=take, args=(s,)) for s in (primary, primary, replica)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    takes.append(primary.take_steers("q"))
    assert not errors
    taken = [text for got in takes for text in got]
    assert sorted(taken) == sorted(added)  # none lost, none duplicated, none unexpected
    assert len(taken) == len(set(taken))
    for got in takes:
        assert got == sorted(got, key=added.index)
    # One adder, so the overall order across takes must be the order added.
    assert sorted(taken, key=added.index) == added


def test_transcripts_round_trip_with_either_kind_of_connection(
    make_store: Callable[[], MySQLStore],
) -> None:
    primary, replica = make_store(), make_store()
    transcript = [
        Message("system", (Text("be brief"),)),
        Message("assistant", (ToolCall("1", "f", '{"z":1,"a":[1, 2],"z":3}'),)),
    ]
    primary.save("s", transcript)
    assert replica.messages("s") == transcript
    replica.save("s", transcript[:1])
    assert primary.messages("s") == transcript[:1]
    primary.save("s", [])
    assert replica.messages("s") == []


def test_round_trips_of_takes_and_adds(db: str, take_path: str) -> None:
    """Issue 11: round trips counted on the wire (every command pymysql sends waits for
    its answer). A take is SET TRANSACTION, BEGIN, the row lock, one DELETE ...
    RETURNING and COMMIT, however many steers it takes; without RETURNING (MySQL) a
    SELECT ... FOR UPDATE and a DELETE per 1,000 ids replace that DELETE."""
    parts = urlsplit(db)
    wire = RoundTrips(parts.hostname or "127.0.0.1", parts.port or 3306, "mysql")
    counts: dict[str, int] = {}

    def count(name: str, call: Callable[[], Any]) -> Any:
        before = wire.count
        result = call()
        counts[name] = wire.count - before
        return result

    try:
        with closing(connect(_via(db, wire.port))) as conn:
            store = MySQLStore(conn)
            store.add_steer("s", "warm")  # reads max_allowed_packet, once per connection
            assert store.take_steers("s") == ["warm"]
            assert count("empty take", lambda: store.take_steers("s")) == []
            count("add", lambda: store.add_steer("s", "0"))
            assert count("take of 1", lambda: store.take_steers("s")) == ["0"]
            added = [f"{i:04d}" for i in range(2500)]
            with closing(connect(db)) as direct, direct.cursor() as cur:
                cur.executemany("INSERT INTO agent_steers (session, text) VALUES (%s, %s)", [(b"s", t) for t in added])
                direct.commit()
            assert count("take of 2,500", lambda: store.take_steers("s")) == added
            mariadb = "mariadb" in conn.get_server_info().lower()
    finally:
        wire.close()
    if take_path == "server's own take" and mariadb:
        assert counts == {"empty take": 5, "add": 5, "take of 1": 5, "take of 2,500": 5}
    else:
        assert counts == {"empty take": 5, "add": 5, "take of 1": 6, "take of 2,500": 8}


# -- lost connections ---------------------------------------------------------------------


def _kill(db: str, connection_id: int) -> None:
    _query(db, f"KILL {int(connection_id)}")


def test_a_given_connection_recovers_after_kill(db: str) -> None:
    """Issue 10, item 5: after KILL, a store given one connection failed every later
    call with "(0, '')"; now the call that meets the dead connection fails, having
    changed nothing, and the next one reconnects."""
    with closing(connect(db)) as conn:
        store = MySQLStore(conn)
        store.save("s", _texts(2))
        store.add_steer("s", "kept")
        for call in (
            lambda: store.save("s", _texts(3, "new")),
            lambda: store.messages("s"),
            lambda: store.add_steer("s", "new"),
            lambda: store.take_steers("s"),
        ):
            _kill(db, conn.thread_id())
            with pytest.raises(StoreError, match=r" session 's' failed: .*(Lost connection|gone away)"):
                call()
            assert store.messages("s") == _texts(2)  # reconnected; nothing changed
        assert store.take_steers("s") == ["kept"]


def _wait_for_statement(db: str, connection_id: int, needle: str) -> None:
    for _ in range(3000):  # gives up after about 30 s: a hang, not a timing assertion
        rows = _query(db, "SELECT info FROM information_schema.processlist WHERE id = %s",
                      (connection_id,))
        if rows and rows[0][0] and needle in rows[0][0]:
            return
        time.sleep(0.01)
    raise AssertionError(f"connection {connection_id} never ran a statement on {needle}")


@pytest.mark.parametrize("operation", ["save", "add_steer", "take_steers"])
def test_a_connection_killed_mid_transaction_changes_nothing(db: str, operation: str) -> None:
    """KILLed while it waits on a lock the test holds, an operation fails with
    StoreError naming the operation, the session and the cause, leaves everything as
    it was, and its handle (one given connection) works again at once."""
    with closing(connect(db)) as conn, closing(connect(db)) as holder:
        store = MySQLStore(conn)
        store.save("s", _texts(2))
        store.add_steer("s", "kept")
        with holder.cursor() as cur:
            cur.execute("SELECT 1 FROM agent_sessions WHERE session = %s FOR UPDATE", (b"s",))
        calls = {
            "save": lambda: store.save("s", _texts(3, "new")),
            "add_steer": lambda: store.add_steer("s", "new"),
            "take_steers": lambda: store.take_steers("s"),
        }
        errors: list[BaseException] = []

        def call() -> None:
            try:
                calls[operation]()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        _wait_for_statement(db, conn.thread_id(), "agent_sessions")
        _kill(db, conn.thread_id())
        thread.join()
        holder.rollback()
        assert len(errors) == 1 and type(errors[0]) is StoreError, errors
        verb = {"save": "save to", "add_steer": "add_steer to", "take_steers": "take_steers from"}
        assert str(errors[0]).startswith(f"{verb[operation]} session 's' failed: "), str(errors[0])
        assert str(errors[0]).split("failed: ", 1)[1].strip()
        assert store.messages("s") == _texts(2)
        assert store.take_steers("s") == ["kept"]


def _via(db: str, port: int) -> str:
    parts = urlsplit(db)
    return urlunsplit((parts.scheme, f"{parts.netloc.rsplit(':', 1)[0]}:{port}", parts.path, "", ""))


@pytest.mark.parametrize("operation", ["save", "add_steer", "take_steers"])
def test_a_connection_lost_after_commit_raises_outcome_unknown(db: str, operation: str) -> None:
    """Issue 10, item 3 on MariaDB: the COMMIT reaches the server and lands, its answer
    never comes back; the store must say the outcome is unknown (a take: with the
    steers it read), and its one connection must work again afterwards."""
    parts = urlsplit(db)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 3306)
    try:
        with closing(connect(_via(db, proxy.port))) as conn:
            direct, cut = MySQLStore(lambda: connect(db)), MySQLStore(conn)
            direct.save("s", _texts(2))
            direct.add_steer("s", "queued")
            proxy.cut_after_commit(MYSQL_COMMIT)
            with pytest.raises(OutcomeUnknown) as info:
                if operation == "save":
                    cut.save("s", _texts(3, "new"))
                elif operation == "add_steer":
                    cut.add_steer("s", "added")
                else:
                    cut.take_steers("s")
            assert proxy.cut.is_set(), "the proxy never saw the COMMIT"
            transcript = cut.messages("s")
            left = direct.take_steers("s")
    finally:
        proxy.close()
    verb = {"save": "save to", "add_steer": "add_steer to", "take_steers": "take_steers from"}
    assert str(info.value).startswith(
        f"{verb[operation]} session 's' may or may not have taken effect: the connection was "
        "lost after COMMIT was sent"
    ), str(info.value)
    assert transcript == (_texts(3, "new") if operation == "save" else _texts(2))
    assert left == {"save": ["queued"], "add_steer": ["queued", "added"], "take_steers": []}[operation]
    assert info.value.steers == (["queued"] if operation == "take_steers" else [])


_SMALL_PACKET = 512 * 1024


@pytest.fixture
def small_packet_db(storetest_mysql_url: str, tmp_path: Path) -> Iterator[str]:
    """A database on a server whose max_allowed_packet is 512 KiB. With local server
    binaries, a private server: SET GLOBAL on the run's server would reach other tests'
    new connections. Otherwise (a server from STORETEST_MYSQL_URL, used by one process
    in CI) the run's server, set for the test and restored."""
    binaries = provisioning._local_binaries()
    if binaries is not None and servers.url_from_env("mysql") is None:
        server = provisioning._start_local(tmp_path / "small", *binaries)
        try:
            _query(server.url, f"SET GLOBAL max_allowed_packet = {_SMALL_PACKET}")
            _query(server.url, "CREATE DATABASE small CHARACTER SET utf8mb4")
            url = urlunsplit((*urlsplit(server.url)[:2], "/small", "", ""))
            _apply_schema(url)
            yield url
        finally:
            servers._stop_process(server.pid, server.stop_signal)
            shutil.rmtree(server.directory, ignore_errors=True)
        return
    server_url = _server_url(storetest_mysql_url)
    (before,) = _query(server_url, "SELECT @@global.max_allowed_packet")[0]
    name = f"storetest_small_{secrets.token_hex(4)}"
    _query(server_url, f"SET GLOBAL max_allowed_packet = {_SMALL_PACKET}")
    try:
        _query(server_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        url = urlunsplit((*urlsplit(server_url)[:2], f"/{name}", "", ""))
        _apply_schema(url)
        yield url
    finally:
        _query(server_url, f"SET GLOBAL max_allowed_packet = {int(before)}")
        _query(server_url, f"DROP DATABASE IF EXISTS `{name}`")


def test_inserts_are_cut_to_fit_max_allowed_packet(small_packet_db: str) -> None:
    """Issue 10, item 6: 3,000 messages of 300 bytes failed at max_allowed_packet=512K
    because inserts were batched into statements of about 1 MB."""
    messages = [Message.text("user", f"{i:05d}" + "x" * 295) for i in range(3000)]
    with closing(connect(small_packet_db)) as conn:
        assert _query(small_packet_db, "SELECT @@max_allowed_packet") == [(_SMALL_PACKET,)]
        store = MySQLStore(conn)
        store.save("s", messages)
        assert MySQLStore(lambda: connect(small_packet_db)).messages("s") == messages


def test_a_value_too_large_for_the_packet_limit_is_refused_naming_it(small_packet_db: str) -> None:
    """A message or steer no statement can carry is refused before it is sent, with an
    error naming max_allowed_packet, and the connection stays usable."""
    huge = "y" * (_SMALL_PACKET + 1)
    with closing(connect(small_packet_db)) as conn:
        store = MySQLStore(conn)
        store.save("s", _texts(2))
        with pytest.raises(StoreError, match=r"^save to session 's' failed: message 2 is .*"
                           r"max_allowed_packet \(524,288 bytes\)"):
            store.save("s", [*_texts(2), Message.text("user", huge)])
        with pytest.raises(StoreError, match=r"^add_steer to session 's' failed: the steer is .*"
                           r"max_allowed_packet \(524,288 bytes\)"):
            store.add_steer("s", huge)
        assert store.messages("s") == _texts(2)
        assert store.take_steers("s") == []


# -- provisioning -------------------------------------------------------------------------


def test_an_env_url_gets_a_fresh_database_dropped_afterwards(
    storetest_mysql_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server_url(storetest_mysql_url)
    monkeypatch.setenv("STORETEST_MYSQL_URL", server)
    provision = provisioning.provision(servers.TestRun(tmp_path / "p", tmp_path / "s"))
    url = next(provision)
    name = urlsplit(url).path.lstrip("/")
    assert name.startswith("storetest_")
    assert name != urlsplit(storetest_mysql_url).path.lstrip("/")
    assert _query(server, "SHOW DATABASES LIKE %s", (name,)) == [(name,)]
    charset = _query(
        server,
        "SELECT default_character_set_name FROM information_schema.schemata WHERE schema_name = %s",
        (name,),
    )
    assert charset == [("utf8mb4",)]
    assert next(provision, None) is None
    assert _query(server, "SHOW DATABASES LIKE %s", (name,)) == []


@pytest.fixture
def nothing_available(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STORETEST_MYSQL_URL", raising=False)
    monkeypatch.setattr(provisioning, "docker_engine_answers", lambda: False)
    monkeypatch.setattr(provisioning, "_local_binaries", lambda: None)


@pytest.mark.usefixtures("nothing_available")
def test_with_nothing_available_the_message_names_the_three_ways(tmp_path: Path) -> None:
    with pytest.raises(servers.Unavailable) as info:
        next(provisioning.provision(servers.TestRun(tmp_path / "p", tmp_path / "s")))
    message = str(info.value)
    assert "STORETEST_MYSQL_URL" in message
    assert "Docker engine" in message
    assert "MariaDB/MySQL server binaries" in message


_INNER_CONFTEST = """
import storetest._engine.servers.mysql as provisioning

provisioning.docker_engine_answers = lambda: False
provisioning._local_binaries = lambda: None
"""

_INNER_TEST = """
def test_needs_mysql(storetest_mysql_url):
    assert storetest_mysql_url
"""


@pytest.mark.parametrize("require", [None, "mysql", "postgres"])
def test_store_require_turns_the_skip_into_a_failure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require: str | None
) -> None:
    monkeypatch.delenv("STORETEST_MYSQL_URL", raising=False)
    if require is None:
        monkeypatch.delenv("STORETEST_REQUIRE", raising=False)
    else:
        monkeypatch.setenv("STORETEST_REQUIRE", require)
    pytester.makeconftest(_INNER_CONFTEST)
    pytester.makepyfile(_INNER_TEST)
    result = pytester.runpytest_subprocess("-rsE", "-p", "no:cacheprovider")
    if require == "mysql":
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*mysql is required (STORETEST_REQUIRE) but unavailable*"])
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*no mysql database*STORETEST_MYSQL_URL*Docker engine*server binaries*"])
