from storetest import run_conformance
from storetest.item_sessions import item_sessions
from tests.item_histories import memory_sessions

run_conformance(item_sessions(memory_sessions), name="memory-items")
