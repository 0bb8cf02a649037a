"""The suite against the SQLite reference store: two stores on one file are replicas."""

from reference_stores.sqlite import SQLiteStore
from storetest import run_conformance


def sqlite(tmp_path):
    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


run_conformance(sqlite, replica=sqlite, name="sqlite")
