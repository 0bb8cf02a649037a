"""The SQLite log store against the whole conformance suite: the replica is a second
store on the same file."""

from reference_stores.sqlite_log import SQLiteLogStore
from storetest import run_conformance


def sqlite_log(tmp_path):
    with SQLiteLogStore(tmp_path / "logs.db") as store:
        yield store


def replica(tmp_path):
    with SQLiteLogStore(tmp_path / "logs.db") as store:
        yield store


run_conformance(sqlite_log, replica=replica, name="sqlite-log", reopen=sqlite_log)
