"""The SQLite log store's own promises, beyond the conformance suite: tables created on
open with no JSON affinity, exact values at the edges, durability setting, errors that
name the session, and writers in several processes."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from reference_stores.sqlite_log import SQLiteLogStore
from storetest.contract import Message, StoreError
from storetest.entries import Entry

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def msg(entry_id: str, parent: str | None = None) -> Entry:
    return Entry.message(entry_id, parent, T0, Message.text("user", entry_id))


def test_the_table_is_created_on_open_with_text_and_blob_columns(tmp_path: Path) -> None:
    SQLiteLogStore(tmp_path / "a.db").close()
    SQLiteLogStore(tmp_path / "a.db").close()  # idempotent
    with sqlite3.connect(tmp_path / "a.db") as conn:
        types = {name: kind for _, name, kind, *_ in conn.execute("PRAGMA table_info(storetest_log_entries)")}
    assert types["payload"] == "TEXT" and types["id"] == types["session"] == "BLOB"
    assert "JSON" not in types.values()


def test_values_at_the_edges_come_back_exactly(tmp_path: Path) -> None:
    edge = [
        Entry.custom("\x00", None, datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "k\x00", "1.0"),
        Entry.custom("1", "\x00", datetime(9999, 12, 31, 23, 59, 59, 999999, timezone(timedelta(hours=-12))),
                     "k", '{"a":1.0, "a":2}'),
        Entry.compaction("c", "1", T0, "sum\x00mary", "\x00"),
    ]
    with SQLiteLogStore(tmp_path / "a.db") as store:
        store.append("s\x00", edge)
        assert store.entries("s\x00") == edge and store.entries("s") == []


@pytest.mark.parametrize(("durable", "level"), [(True, 2), (False, 1)])
def test_durable_chooses_synchronous_full_or_normal(tmp_path: Path, durable: bool, level: int) -> None:
    with SQLiteLogStore(tmp_path / "a.db", durable=durable) as store:
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (level,)


def test_errors_name_the_operation_and_the_session(tmp_path: Path) -> None:
    store = SQLiteLogStore(tmp_path / "a.db")
    store.append("s", [msg("a")])
    with sqlite3.connect(tmp_path / "a.db") as conn:
        conn.execute("UPDATE storetest_log_entries SET payload = 'not json'")
    with pytest.raises(StoreError, match="read of session 's' failed: a stored entry is corrupt"):
        store.entries("s")
    store.close()
    with pytest.raises(StoreError, match="append to session 't' failed: the store is closed"):
        store.append("t", [msg("a")])


def test_writers_in_several_processes_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    with SQLiteLogStore(db) as store:
        store.append("s", [msg("root")])
    pids = []
    for w in range(4):
        pid = os.fork()
        if pid == 0:
            try:
                mine = SQLiteLogStore(db, durable=False)
                for b in range(20):
                    mine.append("s", [msg(f"w{w}-{b}-0", "root"), msg(f"w{w}-{b}-1", f"w{w}-{b}-0")])
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0
    with SQLiteLogStore(db) as store:
        ids = [e.id for e in store.entries("s")]
    assert len(ids) == 161
    for w in range(4):
        assert [i for i in ids if i.startswith(f"w{w}-")] == [f"w{w}-{b}-{k}" for b in range(20) for k in (0, 1)]
    pairs = [ids[i:i + 2] for i in range(1, len(ids), 2)]
    assert all(a[:-1] == b[:-1] for a, b in pairs)  # each batch in one piece
