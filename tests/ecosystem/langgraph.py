"""LangGraph's own checkpointers (langgraph-checkpoint, -sqlite, -postgres), judged
through their own public API (``BaseCheckpointSaver``'s methods).

Each binding is one line for the author (``checkpointers(outer factory)``) over an outer
factory at the top level of ``tests/checkpointers.py``; nothing here imports LangGraph
at import time. ``InMemorySaver`` lives in one process's memory: the clause that opens
the saver in child processes does not apply to it.
"""

from __future__ import annotations

from tests.checkpointers import memory_checkpointer, postgres_checkpointer, sqlite_checkpointer
from tests.ecosystem.common import Contender, Defect

PROJECT = "langgraph-checkpoint"
TITLE = "LangGraph checkpointers (`langgraph-checkpoint`, `-sqlite`, `-postgres`)"
#: The import names the savers need (tests/ecosystem/test_repros.py skips or fails without them).
REQUIRES = ("langgraph.checkpoint.memory", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres",
            "aiosqlite", "psycopg")
#: What installs every contender's dependencies.
INSTALL = "pip install -e '.[langgraph]'"
#: The distributions whose versions the table records.
DISTRIBUTIONS = ("langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres",
                 "aiosqlite", "psycopg")

#: The clause that runs the saver in child processes: an in-memory saver has no data there.
IN_ONE_PROCESS = {"put_writes_from_processes_lose_nothing": "the saver keeps its data in one process's memory"}

_MEMORY, _SQLITE, _POSTGRES = "InMemorySaver", "AsyncSqliteSaver (file)", "AsyncPostgresSaver (psycopg)"

CONTENDERS = [
    Contender(_MEMORY, PROJECT, lambda: memory_checkpointer, skip=IN_ONE_PROCESS),
    Contender(_SQLITE, "langgraph-checkpoint-sqlite", lambda: sqlite_checkpointer, reopen=True),
    Contender(_POSTGRES, "langgraph-checkpoint-postgres", lambda: postgres_checkpointer, backends=("postgres",),
              reopen=True),
]

#: Measured once, by a loop of 40 calls of the repro's _round() on fresh databases (docs/langgraph.md).
_SETUP_RACE = ("below 1 in 1,000: every one of 40 rounds of four setup() calls on a fresh database failed, and "
               "the repro tries up to 10 rounds")

#: Measured once on this machine (load about 13, 2 cores): six runs of the repro's loop failed at rounds 60-173.
_SQLITE_SETUP_RACE = ("below 1 in 10^10 at the measured rate (about 1 round in 120 fails; the repro tries up to "
                      "3,000)")

DEFECTS = [
    Defect(_SQLITE, "checkpoints_round_trip_exactly", "a bytearray channel value comes back as bytes (channel "
           "values kept inside the checkpoint's one msgpack blob, where the serde's bytearray tag is lost)",
           "tests/ecosystem/repros/langgraph/sqlite_bytearray_as_bytes.py", True),
    Defect(_SQLITE, "checkpoint_first_calls_on_a_fresh_backend_succeed", "savers starting together on a fresh "
           "file now and then fail setup() at once with 'database is locked' (its PRAGMA journal_mode=WAL racing "
           "another connection's: SQLite does not wait the busy timeout for it)",
           "tests/ecosystem/repros/langgraph/sqlite_setup_races.py", False, _SQLITE_SETUP_RACE),
    Defect(_POSTGRES, "checkpoint_values_keep_nul", "a string channel value with a NUL is refused "
           "(UntranslatableCharacter: primitives kept inline in jsonb; LangGraph issue 1878)",
           "tests/ecosystem/repros/langgraph/postgres_nul_in_a_value.py", True),
    Defect(_POSTGRES, "checkpoint_first_calls_on_a_fresh_backend_succeed", "savers starting together on a fresh "
           "database fail setup() ('duplicate key value violates unique constraint pg_type_typname_nsp_index')",
           "tests/ecosystem/repros/langgraph/postgres_setup_races.py", False, _SETUP_RACE),
]
