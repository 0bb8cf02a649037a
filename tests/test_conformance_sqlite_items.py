from storetest import item_sessions, run_conformance
from tests.item_histories import sqlite_sessions

run_conformance(item_sessions(sqlite_sessions), name="sqlite-items")
