from storetest import item_sessions, run_conformance
from tests.item_histories import memory_sessions

run_conformance(item_sessions(memory_sessions), name="memory-items",
                skip={"adds_from_processes_land_whole": "the history lives in one process's memory"})
