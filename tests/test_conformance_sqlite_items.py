from storetest import item_sessions, run_conformance
from tests.item_histories import sqlite_sessions

sqlite_items = item_sessions(sqlite_sessions)
run_conformance(sqlite_items, name="sqlite-items", reopen=sqlite_items)
