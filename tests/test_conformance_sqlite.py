"""The suite against the SQLite reference store: two stores on one file are replicas."""

from reference_stores.sqlite import SQLiteStore
from storetest import run_conformance


def sqlite(tmp_path):
    # What the clauses observe does not depend on when commits reach the disk; an fsync
    # per commit (the FULL default, tested in test_sqlite_store.py) only slows them.
    with SQLiteStore(tmp_path / "sessions.db", synchronous="NORMAL") as store:
        yield store


run_conformance(sqlite, replica=sqlite, name="sqlite", reopen=sqlite)
