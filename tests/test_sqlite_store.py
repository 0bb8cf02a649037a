"""Tests specific to the SQLite store: its schema, exact keys, cross-process steers,
given connections, error handling and incremental saves."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from reference_stores import sqlite as sqlite_module
from reference_stores._incremental import DIGEST_SIZE, chain_digests, row_text
from reference_stores.sqlite import SCHEMA, SQLiteStore
from storetest.codec import CodecError, decode_trusted, encode_message
from storetest.contract import Attachment, Message, StoreError, Text, ToolCall, ToolResult

TABLES = ("storetest_sessions", "storetest_messages", "storetest_steers")
TEXT_COLUMNS = {
    ("storetest_sessions", "session"),
    ("storetest_messages", "role"),
    ("storetest_messages", "body"),
    ("storetest_messages", "digest"),
    ("storetest_messages", "kind"),
    ("storetest_messages", "call_id"),
    ("storetest_messages", "name"),
    ("storetest_steers", "session"),
    ("storetest_steers", "text"),
}


def turn(i: int) -> Message:
    return Message.text("user" if i % 2 else "assistant", f"turn {i}: " + "x" * 40)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(db_path) as s:
        yield s


@pytest.fixture
def traced(db_path: Path) -> Iterator[tuple[SQLiteStore, sqlite3.Connection, list[str]]]:
    """A store on a connection the test can watch: every statement it runs is logged."""
    conn = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    with SQLiteStore(conn) as s:
        yield s, conn, statements
    conn.close()


def run_sql(path: Path, sql: str) -> list[Any]:
    """Run one statement on a connection of the test's own, bypassing the store."""
    with closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(sql).fetchall()


def changes_during(conn: sqlite3.Connection, action: Any) -> int:
    before = conn.total_changes
    action()
    return conn.total_changes - before


# -- schema and exact values --------------------------------------------------------


def test_text_columns_are_declared_text_or_blob(store: SQLiteStore, db_path: Path) -> None:
    """A column declared JSON or STRING has NUMERIC affinity and turns '1.0' into 1."""
    declared = {
        (table, name): decl.upper()
        for table in TABLES
        for _, name, decl, *_ in run_sql(db_path, f"PRAGMA table_info({table})")
    }
    assert TEXT_COLUMNS <= declared.keys()
    wrong = {
        col: decl for col, decl in declared.items() if col in TEXT_COLUMNS and decl not in {"TEXT", "BLOB"}
    }
    assert wrong == {}, f"text-holding columns with numeric affinity: {wrong}"
    others = {col: decl for col, decl in declared.items() if col not in TEXT_COLUMNS}
    assert set(others.values()) <= {"INTEGER"}, others


def test_schema_is_exported_and_idempotent(tmp_path: Path) -> None:
    """SCHEMA is what the store runs, and opening a second store on the file is harmless."""
    conn = sqlite3.connect(tmp_path / "plain.sqlite")
    for _ in range(2):
        for statement in SCHEMA:
            conn.execute(statement)
    conn.close()
    with SQLiteStore(tmp_path / "plain.sqlite") as s, SQLiteStore(tmp_path / "plain.sqlite") as t:
        s.save("x", [turn(1)])
        assert t.messages("x") == [turn(1)]


def test_numeric_looking_text_round_trips(store: SQLiteStore, db_path: Path) -> None:
    """'1.0' stays the text '1.0' in a message, tool arguments, a steer and a session id."""
    transcript = [
        Message.text("user", "1.0"),
        Message(
            "assistant",
            (ToolCall("1", "calc", "1.0"), ToolCall("2", "f", '{"z":1,"a":[1, 2],"z":3}')),
        ),
        Message("tool", (ToolResult("1", "1e2", is_error=True), Attachment("a/b", b"\x00\xff1.0"))),
    ]
    store.save("1.0", transcript)
    store.add_steer("1.0", "1.0")
    steer_kinds = run_sql(db_path, "SELECT typeof(session), typeof(text) FROM storetest_steers")
    assert steer_kinds == [("blob", "blob")]
    assert store.messages("1.0") == transcript
    assert store.take_steers("1.0") == ["1.0"]
    kinds = run_sql(
        db_path,
        "SELECT DISTINCT typeof(s.session), typeof(m.body) FROM storetest_messages m "
        "JOIN storetest_sessions s ON s.id = m.session_id",
    )
    assert kinds == [("blob", "text")]


def test_one_text_messages_are_stored_as_role_and_raw_text(store: SQLiteStore, db_path: Path) -> None:
    """The common message is its role and its text as is (NUL and quotes included), and
    reads back without JSON; any other message is its codec JSON with no role."""
    transcript = [Message.text("user", 'say "hi"\x00 \u2028'), Message("assistant", (Text("a"), Text("b")))]
    store.save("s", transcript)
    rows = run_sql(db_path, "SELECT role, body FROM storetest_messages ORDER BY position")
    assert rows[0] == ("user", 'say "hi"\x00 \u2028')
    assert rows[1][0] is None and json.loads(rows[1][1])["role"] == "assistant"
    with SQLiteStore(db_path) as fresh:
        assert fresh.messages("s") == transcript


def test_one_tool_call_or_result_is_stored_in_columns(store: SQLiteStore, db_path: Path) -> None:
    """A message of one tool call or one tool result is its kind (role and type), call
    id, tool name and raw text in columns, read back without JSON; ``role`` stays empty,
    so a release that reads such a row as codec JSON fails on it instead of misreading."""
    transcript = [
        Message("assistant", (ToolCall("call_1", "lookup", '{"q": "a\\"b"}\x00'),)),
        Message("tool", (ToolResult("call_1", "found\x00 it"),)),
        Message("tool", (ToolResult("call_1", "", is_error=True),)),
        Message("user", (ToolCall("", "", ""),)),
        Message("assistant", (ToolCall("c", "n", "{}"), Text("and text"))),
    ]
    store.save("s", transcript)
    rows = run_sql(db_path, "SELECT role, body, kind, call_id, name FROM storetest_messages ORDER BY position")
    assert rows[:4] == [
        (None, '{"q": "a\\"b"}\x00', "assistant call", "call_1", "lookup"),
        (None, "found\x00 it", "tool result", "call_1", None),
        (None, "", "tool error", "call_1", None),
        (None, "", "user call", "", ""),
    ]
    assert rows[4][0] is None and rows[4][2:] == (None, None, None)
    for body in (rows[0][1], rows[1][1]):
        with pytest.raises(CodecError):
            decode_trusted(body)
    with SQLiteStore(db_path) as fresh:
        assert fresh.messages("s") == transcript


def test_a_file_from_before_tool_columns_is_read_and_written_on(db_path: Path) -> None:
    """A file whose message table lacks the tool columns gets them when opened; its rows
    (tool calls as codec JSON) read as before, and new ones are kept in columns."""
    old = [Message("assistant", (ToolCall("call_1", "lookup", "{}"),)), Message("tool", (ToolResult("call_1", "ok"),))]
    with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE storetest_sessions (id INTEGER PRIMARY KEY, session BLOB NOT NULL UNIQUE, "
                     "version INTEGER NOT NULL)")
        conn.execute("CREATE TABLE storetest_messages (session_id INTEGER NOT NULL, position INTEGER NOT NULL, "
                     "digest BLOB NOT NULL, role TEXT, body TEXT NOT NULL, PRIMARY KEY (session_id, position)) "
                     "WITHOUT ROWID")
        conn.execute("INSERT INTO storetest_sessions VALUES (1, CAST('s' AS BLOB), 1)")
        digests = chain_digests(b"", [encode_message(m) for m in old])
        for i, message in enumerate(old):
            conn.execute("INSERT INTO storetest_messages VALUES (1, ?, ?, NULL, ?)",
                         (i, digests[i * DIGEST_SIZE : (i + 1) * DIGEST_SIZE], encode_message(message)))
    with SQLiteStore(db_path) as store:
        assert store.messages("s") == old
        grown = [*old, Message("tool", (ToolResult("call_1", "more"),))]
        store.save("s", grown)
    with SQLiteStore(db_path) as fresh:
        assert fresh.messages("s") == grown
    assert run_sql(db_path, "SELECT kind FROM storetest_messages ORDER BY position") == [
        (None,), (None,), ("tool result",)]


def test_a_row_of_unknown_kind_is_refused_by_name(store: SQLiteStore, db_path: Path) -> None:
    store.save("s", [Message("tool", (ToolResult("c", "ok"),))])
    run_sql(db_path, "UPDATE storetest_messages SET kind = 'tool sideways'")
    with SQLiteStore(db_path) as fresh, pytest.raises(StoreError, match="unknown kind 'tool sideways'"):
        fresh.messages("s")


@pytest.mark.parametrize("text_factory", [bytes, lambda b: b.decode("utf-8", "replace").upper()])
def test_an_application_text_factory_changes_nothing(tmp_path: Path, text_factory: Any) -> None:
    """A given connection set to return text as bytes (or anything else) still reads
    back the messages saved, and keeps its setting."""
    conn = sqlite3.connect(tmp_path / "tf.sqlite", isolation_level=None, check_same_thread=False)
    conn.text_factory = text_factory
    transcript = [Message.text("user", "hi"), Message("assistant", (Text("a"), Text("b")))]
    SQLiteStore(conn).save("s", transcript)
    assert SQLiteStore(conn).messages("s") == transcript  # a handle that remembers nothing
    assert conn.text_factory is text_factory
    conn.close()


def test_nul_in_steers_and_session_ids_round_trips(store: SQLiteStore) -> None:
    """SQL string functions stop at NUL; the store must keep text past it exactly."""
    session = "a\x00b"
    store.save(session, [Message.text("user", "before\x00after")])
    store.add_steer(session, "x\x00y")
    store.add_steer(session, "\x00")
    assert store.messages("a") == []
    assert store.take_steers("a") == []
    assert store.messages(session) == [Message.text("user", "before\x00after")]
    assert store.take_steers(session) == ["x\x00y", "\x00"]


def test_session_ids_compare_exactly(store: SQLiteStore) -> None:
    """Case, trailing spaces, NFC/NFD and a NUL suffix make different sessions."""
    ids = ["a", "A", "a ", "\u00e9", "e\u0301", "a\x00", "\U0001f600"]
    for i, session in enumerate(ids):
        store.save(session, [turn(i)])
        store.add_steer(session, f"steer {i}")
    for i, session in enumerate(ids):
        assert store.messages(session) == [turn(i)], session
        assert store.take_steers(session) == [f"steer {i}"], session


def test_bad_arguments_change_nothing(store: SQLiteStore) -> None:
    """Arguments are checked before the database is touched."""
    store.save("s", [turn(1)])
    with pytest.raises(TypeError):
        store.save("s", [turn(2), "not a message"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        store.add_steer("s", "lone \ud800 surrogate")
    with pytest.raises(ValueError):
        store.save("", [])
    assert store.messages("s") == [turn(1)]
    assert store.take_steers("s") == []


# -- concurrency ---------------------------------------------------------------------


def _steer_worker(path: str, name: str, count: int, barrier: Any, results: Any) -> None:
    takes: list[list[str]] = []
    try:
        with SQLiteStore(path) as store:
            barrier.wait()
            for i in range(count):
                store.add_steer("queue", f"{name}:{i}")
                takes.append(store.take_steers("queue"))
            takes.append(store.take_steers("queue"))
    except Exception as exc:
        # Reported rather than raised, so the parent fails with the reason at once
        # instead of waiting for a result that never comes.
        results.put((name, f"{type(exc).__name__}: {exc}"))
    else:
        results.put((name, takes))


def order_problems(steers: list[str]) -> list[str]:
    """Each adder's steers must come out in the order that adder left them."""
    last: dict[str, int] = {}
    for s in steers:
        name, _, i = s.rpartition(":")
        if last.get(name, -1) >= int(i):
            return [f"out of order: {s} after {name}:{last[name]} in {steers}"]
        last[name] = int(i)
    return []


def check_queue(added: dict[str, int], takes: list[list[str]]) -> list[str]:
    """Jepsen's total-queue counts, plus order within each take: every problem found."""
    expected = Counter(f"{name}:{i}" for name, n in added.items() for i in range(n))
    taken = Counter(s for take in takes for s in take)
    problems = [f"lost: {s}" for s in expected - taken]
    problems += [f"duplicated: {s} x{taken[s]}" for s in taken if s in expected and taken[s] > 1]
    problems += [f"unexpected: {s}" for s in taken if s not in expected]
    for take in takes:
        problems += order_problems(take)
    return problems


def test_two_processes_add_and_take_each_steer_exactly_once(db_path: Path) -> None:
    """Separate processes on one file: no steer lost, duplicated or reordered."""
    SQLiteStore(db_path).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    # Enough rounds that the two processes overlap on every run: with a deferred
    # BEGIN in take_steers this fails with "database is locked" every time.
    count = 1000
    procs = [
        ctx.Process(target=_steer_worker, args=(str(db_path), name, count, barrier, results))
        for name in ("p1", "p2")
    ]
    for p in procs:
        p.start()
    by_process = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    failed = {name: r for name, r in by_process.items() if isinstance(r, str)}
    assert failed == {}
    with SQLiteStore(db_path) as store:
        leftover = store.take_steers("queue")
    takes = [take for process_takes in by_process.values() for take in process_takes]
    problems = check_queue({"p1": count, "p2": count}, [*takes, leftover])
    # One process's takes happened one after another, so even across them each
    # adder's steers must come out in order.
    for name, process_takes in by_process.items():
        problems += [f"{name}: {p}" for p in order_problems([s for t in process_takes for s in t])]
    assert problems == []
    # Both processes really took steers, so the takes did race.
    assert all(any(t) for t in by_process.values())


def test_threads_and_replicas_take_each_steer_exactly_once(db_path: Path) -> None:
    """Many threads over one handle and a replica, adding and taking at once."""
    stores = [SQLiteStore(db_path), SQLiteStore(db_path)]
    takes: list[list[str]] = []
    lock = threading.Lock()
    per_thread = 60

    def work(n: int) -> None:
        store = stores[n % 2]
        for i in range(per_thread):
            store.add_steer("q", f"t{n}:{i}")
            got = store.take_steers("q")
            with lock:
                takes.append(got)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    takes.append(stores[0].take_steers("q"))
    for s in stores:
        s.close()
    assert check_queue({f"t{n}": per_thread for n in range(6)}, takes) == []


def test_concurrent_saves_leave_one_whole_transcript(db_path: Path) -> None:
    """Writers on two handles race; readers only ever see one whole transcript."""
    a = [Message.text("user", f"a{i}") for i in range(40)]
    b = [Message.text("user", "a0"), *(Message.text("user", f"b{i}") for i in range(25))]
    stores = [SQLiteStore(db_path), SQLiteStore(db_path)]
    seen: list[list[Message]] = []
    stop = threading.Event()

    def write(n: int) -> None:
        for i in range(60):
            stores[n % 2].save("s", a if (i + n) % 2 else b)

    def read() -> None:
        while not stop.is_set():
            seen.append(stores[1].messages("s"))

    writers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    final = stores[0].messages("s")
    for s in stores:
        s.close()
    assert final in (a, b)
    mixed = [m for m in seen if m not in ([], a, b)]
    assert mixed == [], f"{len(mixed)} reads saw a mix, e.g. {mixed[0][:5]}"
    assert len(seen) > 0


# -- connections and errors ------------------------------------------------------------


def test_given_connection_is_used_and_left_open(db_path: Path) -> None:
    """A store on the application's connection works and does not close it."""
    conn = sqlite3.connect(db_path, check_same_thread=False)
    with SQLiteStore(conn) as store:
        store.save("s", [turn(1), turn(2)])
        store.add_steer("s", "hi")
        assert store.messages("s") == [turn(1), turn(2)]
        with SQLiteStore(db_path) as replica:
            assert replica.messages("s") == [turn(1), turn(2)]
            assert replica.take_steers("s") == ["hi"]
        assert store.take_steers("s") == []
        assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM storetest_messages").fetchone() == (2,)
    conn.close()


def test_connection_inside_a_transaction_is_refused(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")  # the module opened a transaction
    with pytest.raises(ValueError, match="inside a transaction"):
        SQLiteStore(conn)
    conn.close()


def test_closed_store_names_the_session(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.close()
    store.close()
    with pytest.raises(StoreError, match=r"save to session 'abc' failed: .*closed"):
        store.save("abc", [])
    with pytest.raises(StoreError, match=r"session 'abc'.*closed"):
        store.messages("abc")
    with pytest.raises(StoreError, match=r"session 'abc'.*closed"):
        store.add_steer("abc", "x")
    with pytest.raises(StoreError, match=r"session 'abc'.*closed"):
        store.take_steers("abc")
    with pytest.raises(TypeError):  # arguments are still checked first
        store.save("abc", "not a list")  # type: ignore[arg-type]


def test_database_errors_name_operation_and_session(store: SQLiteStore, db_path: Path) -> None:
    store.save("abc", [turn(1)])
    run_sql(db_path, "UPDATE storetest_messages SET role = NULL, body = 'not json'")
    with pytest.raises(StoreError, match=r"read of session 'abc' failed"):
        store.messages("abc")
    run_sql(db_path, "DROP TABLE storetest_steers")
    with pytest.raises(StoreError, match=r"take_steers from session 'abc' failed: no such table") as info:
        store.take_steers("abc")
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    with pytest.raises(StoreError, match=r"add_steer to session 'abc' failed"):
        store.add_steer("abc", "x")


BOOM_TRIGGER = """
CREATE TRIGGER boom BEFORE INSERT ON storetest_messages
WHEN NEW.body LIKE '%boom%'
BEGIN SELECT RAISE(ABORT, 'boom refused'); END
"""


def test_failed_save_leaves_previous_transcript(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], db_path: Path
) -> None:
    """A save failing after its DELETE and some INSERTs rolls all of it back."""
    store, _, statements = traced
    before = [turn(i) for i in range(6)]
    store.save("abc", before)
    run_sql(db_path, BOOM_TRIGGER)
    changed = [turn(0), Message.text("user", "edited"), turn(7), Message.text("user", "boom")]
    with pytest.raises(StoreError, match=r"save to session 'abc' failed: boom refused") as info:
        store.save("abc", changed)
    assert isinstance(info.value.__cause__, sqlite3.Error)
    with SQLiteStore(db_path) as other:
        assert other.messages("abc") == before
    run_sql(db_path, "DROP TRIGGER boom")
    # What the handle remembered was dropped with the failure: it compares digests.
    statements.clear()
    store.save("abc", changed)
    assert [s for s in statements if "digest FROM" in s]
    assert store.messages("abc") == changed


def test_a_failed_append_names_the_session_and_forgets(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], db_path: Path
) -> None:
    """The common save, one statement appending to what the handle remembers, failing
    for anything but a position taken meanwhile (which falls back to the transaction):
    a ``StoreError`` naming the session and its cause, nothing written, no transaction
    left open, and what the handle remembered dropped, so its next save compares
    digests. A trigger calling a function that raises stands in for the failure."""
    store, conn, statements = traced
    before = [turn(i) for i in range(4)]
    store.save("abc", before)
    armed = [True]

    def explode() -> int:
        if armed[0]:
            raise RuntimeError("disk on fire")
        return 0

    conn.create_function("explode", 0, explode)
    conn.execute("CREATE TEMP TRIGGER explode BEFORE INSERT ON storetest_messages BEGIN SELECT explode(); END")
    statements.clear()
    with pytest.raises(StoreError, match=r"save to session 'abc' failed: user-defined function raised") as info:
        store.save("abc", [*before, turn(4)])
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert statements and all("BEGIN" not in s for s in statements)  # it was the append
    assert not conn.in_transaction
    assert store._remembered.get(b"abc") is None
    with SQLiteStore(db_path) as other:
        assert other.messages("abc") == before
    armed[0] = False
    statements.clear()
    store.save("abc", [*before, turn(4)])
    assert [s for s in statements if "digest FROM" in s]
    assert store.messages("abc") == [*before, turn(4)]


def test_a_refused_append_puts_back_what_the_handle_remembered(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]],
) -> None:
    """The common save remembers its rows just before its one statement, pending until
    the statement wrote them. While it runs, the handle plans no other append from them
    (captured here from inside the statement). The statement refused (here a trigger
    ignores the row, as the primary key refuses a position another handle took), the
    handle puts back the entry it planned from before it saves as usual: that save
    then knows it is the only writer, and the next save appends in one statement again."""
    store, conn, statements = traced
    transcript = [turn(i) for i in range(4)]
    store.save("abc", transcript)
    meanwhile: list[Any] = []

    def refuse_once(position: int) -> int:
        if meanwhile:
            return 0
        meanwhile.append(store._remembered.get(b"abc"))
        meanwhile.append(store._remembered.plan_append(b"abc", [*transcript, turn(5)]))
        return 1

    conn.create_function("refuse_once", 1, refuse_once)
    conn.execute(
        "CREATE TEMP TRIGGER refuse BEFORE INSERT ON storetest_messages WHEN refuse_once(NEW.position) "
        "BEGIN SELECT RAISE(IGNORE); END"
    )
    transcript.append(turn(4))
    statements.clear()
    store.save("abc", transcript)
    assert any("BEGIN" in s for s in statements)  # refused, then saved as usual
    assert store.messages("abc") == transcript
    during, planned = meanwhile
    assert during.length == 5 and during.pending and planned is None
    entry = store._remembered.get(b"abc")
    assert entry is not None and not entry.pending and not entry.shared and entry.length == 5
    transcript.append(turn(5))
    statements.clear()
    store.save("abc", transcript)
    assert all("BEGIN" not in s for s in statements)  # one statement again
    assert store.messages("abc") == transcript


def test_a_save_planned_while_an_append_fails_checks_what_is_stored(
    store: SQLiteStore, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads of one handle: the first's append statement fails after the handle
    remembered its row (pending); the second, saving a tuple (the general save), plans
    from that entry meanwhile and waits for the lock; another handle then appends a
    different message, so the stored version and count are what the entry says. The
    second save must not trust them: it stores exactly its transcript, and the handle's
    next save appends after it with no gap. Trusting the version stored the other
    handle's message in place of the second save's."""
    before = [turn(i) for i in range(3)]
    store.save("abc", before)
    mine, theirs, more = Message.text("assistant", "mine"), Message.text("assistant", "theirs"), turn(9)
    planned = threading.Event()
    prepare = store._remembered.prepare

    def noting_prepare(key: Any, messages: Any) -> Any:
        plan = prepare(key, messages)
        if threading.current_thread().name == "second":
            planned.set()
        return plan

    monkeypatch.setattr(store._remembered, "prepare", noting_prepare)
    second = threading.Thread(target=store.save, args=("abc", (*before, mine, more)), name="second")

    def failing_append(*args: Any) -> bool:
        assert store._remembered.get(b"abc") is args[2]  # remembered before the statement
        second.start()
        assert planned.wait(10)
        with SQLiteStore(db_path) as other:
            other.save("abc", [*before, theirs])
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_module, "_append", failing_append)
    with pytest.raises(StoreError, match="disk I/O error"):
        store.save("abc", [*before, mine])
    monkeypatch.undo()
    second.join(10)
    assert not second.is_alive()
    assert store.messages("abc") == [*before, mine, more]
    store.save("abc", [*before, mine, more, turn(10)])
    assert store.messages("abc") == [*before, mine, more, turn(10)]
    assert run_sql(db_path, "SELECT position FROM storetest_messages ORDER BY position") == [(i,) for i in range(6)]


def test_an_interrupt_as_a_refused_append_is_put_back_forgets(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt may arrive at almost any line once the statement returns
    (CPython checks for signals at calls and backward jumps), here as the refused
    statement's entry is being put back: the handle forgets the entry rather than keep
    rows it never wrote (pending, it would not be trusted, only slow the next save
    down), and its next save leaves no gap."""
    store, conn, _ = traced
    transcript = [turn(i) for i in range(4)]
    store.save("abc", transcript)
    conn.execute("CREATE TEMP TRIGGER refuse BEFORE INSERT ON storetest_messages BEGIN SELECT RAISE(IGNORE); END")
    swap = store._remembered.swap
    calls: list[int] = []

    def interrupted_swap(*args: Any) -> bool:
        calls.append(1)
        if len(calls) == 2:  # putting the entry back
            raise KeyboardInterrupt
        return swap(*args)

    monkeypatch.setattr(store._remembered, "swap", interrupted_swap)
    with pytest.raises(KeyboardInterrupt):
        store.save("abc", [*transcript, turn(4)])
    monkeypatch.undo()
    assert len(calls) == 2
    assert store._remembered.get(b"abc") is None
    conn.execute("DROP TRIGGER refuse")
    store.save("abc", [*transcript, turn(4), turn(5)])
    assert store.messages("abc") == [*transcript, turn(4), turn(5)]


class _RollbackFails(sqlite3.Connection):
    def rollback(self) -> None:
        raise sqlite3.OperationalError("rollback exploded")


def test_failing_rollback_does_not_replace_the_error(db_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conn = sqlite3.connect(db_path, factory=_RollbackFails, isolation_level=None)
    store = SQLiteStore(conn)
    store.save("abc", [turn(1)])
    conn.execute(BOOM_TRIGGER)
    with caplog.at_level(logging.WARNING, logger="reference_stores.sqlite"):
        with pytest.raises(StoreError, match="boom refused") as info:
            store.save("abc", [turn(1), Message.text("user", "boom")])
    assert "boom refused" in str(info.value.__cause__)
    assert "rollback failed" in caplog.text
    sqlite3.Connection.rollback(conn)
    store.close()
    conn.close()
    with SQLiteStore(db_path) as fresh:
        assert fresh.messages("abc") == [turn(1)]


# -- incremental saves -------------------------------------------------------------


def test_save_after_save_writes_only_the_tail(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], db_path: Path
) -> None:
    """Turn N+1 after turn N: one statement, which inserts the message row and nothing
    else (the version stays), nothing read back; two turns at once, one statement too."""
    store, conn, statements = traced
    transcript = [turn(i) for i in range(50)]
    store.save("s", transcript)
    transcript.append(turn(50))
    statements.clear()
    assert changes_during(conn, lambda: store.save("s", transcript)) == 1
    assert len(statements) == 1 and statements[0].startswith("INSERT INTO storetest_messages"), statements
    transcript += [turn(51), turn(52)]
    statements.clear()
    assert changes_during(conn, lambda: store.save("s", transcript)) == 2
    assert len(statements) == 1 and statements[0].startswith("INSERT INTO storetest_messages"), statements
    assert conn.execute("SELECT version FROM storetest_sessions").fetchall() == [(1,)]
    assert store.messages("s") == transcript
    # A save that changes nothing commits nothing: another connection sees no new data.
    with closing(sqlite3.connect(db_path)) as watcher:
        before = watcher.execute("PRAGMA data_version").fetchone()
        store.save("s", list(transcript))
        assert watcher.execute("PRAGMA data_version").fetchone() == before
        store.save("s", [*transcript, turn(51)])
        assert watcher.execute("PRAGMA data_version").fetchone() != before


def test_save_after_read_writes_only_the_tail(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], db_path: Path
) -> None:
    """A handle that read the transcript (as a new replica does) appends cheaply too."""
    store, conn, statements = traced
    with SQLiteStore(db_path) as other:
        other.save("s", [turn(i) for i in range(30)])
    transcript = store.messages("s")
    transcript.append(turn(30))
    statements.clear()
    assert changes_during(conn, lambda: store.save("s", transcript)) == 1
    assert not [s for s in statements if "digest FROM" in s]
    assert store.messages("s") == transcript


def test_a_read_fetches_the_last_digest_alone_and_only_when_it_learns_something(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], db_path: Path
) -> None:
    """A read remembers the messages and the last chain digest (one row), not every
    digest; a re-read of the version it remembers keeps the first read's objects and
    asks for no digest; a read after another handle wrote learns again."""
    store, conn, statements = traced
    with SQLiteStore(db_path) as other:
        other.save("s", [turn(i) for i in range(30)])
        statements.clear()
        first = store.messages("s")
        digest_reads = [s for s in statements if "digest FROM" in s]
        assert len(digest_reads) == 1 and digest_reads[0].endswith("LIMIT 1"), digest_reads
        assert "digest" not in next(s for s in statements if "SELECT role, body" in s)
        statements.clear()
        again = store.messages("s")
        assert again == first and again[0] is not first[0]
        assert not [s for s in statements if "digest FROM" in s]
        known = store._remembered.get(b"s")
        assert known is not None and known.messages[0] is first[0] and known.first == 29
        other.save("s", [turn(i) for i in range(31)])
        statements.clear()
        newer = store.messages("s")
        assert len([s for s in statements if "digest FROM" in s]) == 1
        known = store._remembered.get(b"s")
        assert known is not None and known.messages[0] is newer[0] and known.first == 30
    # A save appending to what was read chains from the digest the read fetched.
    newer.append(turn(31))
    store.save("s", newer)
    stored = [bytes(d) for (d,) in conn.execute("SELECT digest FROM storetest_messages ORDER BY position")]
    whole = chain_digests(b"", [row_text(m) for m in newer])
    assert stored == [whole[i * DIGEST_SIZE : (i + 1) * DIGEST_SIZE] for i in range(len(newer))]


def test_save_after_another_handle_wrote_compares_digests(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]],
    db_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another replica wrote in between: the store reads digests, not bodies, and
    still writes only what differs."""
    store, conn, statements = traced
    mine = [turn(i) for i in range(40)]
    store.save("s", mine)
    with SQLiteStore(db_path) as other:
        other.save("s", [*mine, turn(40)])
        assert other.messages("s") == [*mine, turn(40)]

    def no_decoding(text: object) -> Message:
        raise AssertionError("save decoded a stored message")

    monkeypatch.setattr(sqlite_module, "decode_trusted", no_decoding)
    statements.clear()
    grown = [*mine, turn(40), turn(41)]
    # The one-statement append is refused (row 40 is theirs); the save then reads
    # digests from row 39 on and inserts row 41 alone.
    assert changes_during(conn, lambda: store.save("s", grown)) == 1
    assert statements[0].startswith("INSERT INTO storetest_messages")
    assert [s for s in statements if "digest FROM" in s]
    monkeypatch.undo()
    assert store.messages("s") == grown

    theirs = [*grown[:5], Message.text("user", "rewritten"), *grown[6:]]
    with SQLiteStore(db_path) as other:
        other.save("s", theirs)
        assert other.messages("s") == theirs
    final = [*grown[:10], Message("user", (Text("mine"),))]
    store.save("s", final)
    assert store.messages("s") == final
    with SQLiteStore(db_path) as other:
        assert other.messages("s") == final


def test_a_save_of_what_a_handle_knew_removes_rows_another_appended(db_path: Path) -> None:
    """Appends leave the version alone, so a handle tells rows another appended by
    their count: saving the transcript it knew (no new message, so no append to try)
    removes them, and the rewrite raises the version."""
    with SQLiteStore(db_path) as a, SQLiteStore(db_path) as b:
        mine = [turn(i) for i in range(10)]
        a.save("s", mine)
        theirs = b.messages("s")
        b.save("s", [*theirs, turn(10), turn(11)])
        ((version,),) = run_sql(db_path, "SELECT version FROM storetest_sessions")
        a.save("s", mine)
        assert b.messages("s") == mine
        assert run_sql(db_path, "SELECT version FROM storetest_sessions") == [(version + 2,)]
        # And the handle that appended, saving on from what it wrote, is refused its
        # one-statement append and writes exactly its list.
        b.save("s", [*theirs, turn(10), turn(11), turn(12)])
        assert a.messages("s") == [*mine, turn(10), turn(11), turn(12)]


def test_a_handle_taking_turns_with_another_goes_straight_to_the_transaction(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]], db_path: Path
) -> None:
    """Once a save finds another handle's rows, the next one skips the one-statement
    append (it would be refused); once a save finds nobody else wrote, it tries it
    again."""
    store, _, statements = traced
    transcript = [turn(i) for i in range(20)]
    store.save("s", transcript)
    with SQLiteStore(db_path) as other:
        other.messages("s")
        other.save("s", transcript := [*transcript, turn(20)])
        statements.clear()
        store.save("s", transcript := [*transcript, turn(21)])
        assert statements[0].startswith("INSERT INTO storetest_messages")  # tried, refused
        assert "BEGIN IMMEDIATE" in statements
        other.save("s", transcript := [*transcript, turn(22)])
    for i in (23, 24):  # the first finds row 22 theirs, the second nobody's rows
        statements.clear()
        store.save("s", transcript := [*transcript, turn(i)])
        assert statements[0] == "BEGIN IMMEDIATE"  # not tried: another handle wrote last time
    statements.clear()
    store.save("s", transcript := [*transcript, turn(25)])
    assert len(statements) == 1 and statements[0].startswith("INSERT INTO storetest_messages")
    with SQLiteStore(db_path) as fresh:
        assert fresh.messages("s") == transcript


def test_appends_too_long_for_one_statement_or_on_a_legacy_connection_take_the_transaction(
    db_path: Path,
) -> None:
    """More rows than one statement takes, or a connection the module would open a
    transaction on by itself (an application's, not in autocommit mode): the save runs
    its transaction, and the rows come back whole."""
    conn = sqlite3.connect(db_path, check_same_thread=False)  # isolation_level "": legacy
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    with SQLiteStore(conn) as store:
        transcript = [turn(i) for i in range(5)]
        store.save("s", transcript)
        statements.clear()
        store.save("s", transcript := [*transcript, turn(5)])
        assert "BEGIN IMMEDIATE" in statements and not conn.in_transaction
        statements.clear()
        store.save("s", transcript := [*transcript, *(turn(i) for i in range(6, 6 + 65))])
        assert "BEGIN IMMEDIATE" in statements
    conn.close()
    with SQLiteStore(db_path) as store:
        store.save("s", transcript)
        store.save("s", transcript := [*transcript, *(turn(i) for i in range(71, 71 + 65))])
        assert SQLiteStore(db_path).messages("s") == transcript


def test_a_handle_of_an_earlier_release_is_refused_loudly(store: SQLiteStore, db_path: Path) -> None:
    """Earlier releases raised the version by 1 on every save and trusted an unchanged
    version to mean unchanged rows: they would miss rows this release appends. The
    raise they begin every save with is refused, naming why."""
    store.save("s", [turn(0)])
    with pytest.raises(sqlite3.IntegrityError, match="upgrade storetest in that process"):
        run_sql(db_path, "UPDATE storetest_sessions SET version = version + 1 WHERE session = CAST('s' AS BLOB)")
    assert store.messages("s") == [turn(0)]


def test_edits_shrinks_and_empties_end_exact(store: SQLiteStore, db_path: Path) -> None:
    """Whatever the prefix, the stored rows end as exactly the saved list."""
    base = [turn(i) for i in range(10)]
    for transcript in (
        base,
        base[:4],
        [*base[:2], Message.text("user", "changed"), *base[3:]],
        [],
        [],
        base[:1],
        base,
        base,
    ):
        store.save("s", transcript)
        assert store.messages("s") == transcript
        rows = run_sql(db_path, "SELECT position FROM storetest_messages ORDER BY position")
        positions = [p for (p,) in rows]
        assert positions == list(range(len(transcript)))


def test_remembered_sessions_are_bounded(
    db_path: Path,
) -> None:
    """With room for one session, the evicted one falls back to digests, still right."""
    conn = sqlite3.connect(db_path, check_same_thread=False)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    with SQLiteStore(conn, cache_sessions=1) as store:
        store.save("one", [turn(1)])
        store.save("two", [turn(2)])
        statements.clear()
        store.save("one", [turn(1), turn(3)])
        assert [s for s in statements if "digest FROM" in s]
        statements.clear()
        store.save("one", [turn(1), turn(3), turn(4)])
        assert not [s for s in statements if "digest FROM" in s]
        assert store.messages("one") == [turn(1), turn(3), turn(4)]
        assert store.messages("two") == [turn(2)]
    conn.close()
    with pytest.raises(ValueError):
        SQLiteStore(db_path, cache_sessions=-1)


# -- durability and takes --------------------------------------------------------------


@pytest.mark.parametrize(("given", "level"), [(None, 2), ("FULL", 2), ("NORMAL", 1), ("EXTRA", 3)])
def test_synchronous_is_full_unless_chosen(db_path: Path, given: Any, level: int) -> None:
    """The default fsyncs every commit; NORMAL and EXTRA are there when chosen."""
    with SQLiteStore(db_path, synchronous=given) as store:
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (level,)
        assert store._conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_synchronous_off_and_on_a_given_connection_are_refused(db_path: Path) -> None:
    with pytest.raises(ValueError, match="OFF is refused"):
        SQLiteStore(db_path, synchronous="OFF")  # type: ignore[arg-type]
    conn = sqlite3.connect(db_path)
    with pytest.raises(ValueError, match="PRAGMA synchronous yourself"):
        SQLiteStore(conn, synchronous="NORMAL")
    conn.close()


def test_a_take_is_one_statement_and_keeps_the_order(
    traced: tuple[SQLiteStore, sqlite3.Connection, list[str]],
) -> None:
    """DELETE ... RETURNING removes and returns in one statement; RETURNING has no
    order of its own, so the store sorts by id."""
    store, _, statements = traced
    texts = [f"steer {i}" for i in range(50)]
    for text in texts:
        store.add_steer("s", text)
    statements.clear()
    assert store.take_steers("s") == texts
    touching = [s for s in statements if "storetest_steers" in s]
    assert len(touching) == 1 and touching[0].startswith("DELETE"), statements
    assert store.take_steers("s") == []
