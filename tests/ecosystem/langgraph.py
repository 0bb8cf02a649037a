"""LangGraph's own checkpointers (langgraph-checkpoint, -sqlite, -postgres: the async
classes and the sync ``SqliteSaver`` and ``PostgresSaver``) and the
third-party savers that install beside them (-mysql's asyncmy saver, -plainredis,
-hotkv, -objectstorage, -lmdb), judged through their own public API
(``BaseCheckpointSaver``'s methods).

Each binding is one line for the author (``checkpointers(outer factory)``) over an outer
factory at the top level of ``tests/checkpointers.py``; nothing here imports LangGraph
at import time. ``InMemorySaver`` lives in one process's memory: the clause that opens
the saver in child processes does not apply to it.
"""

from __future__ import annotations

from tests.checkpointers import (
    hotkv_checkpointer,
    lmdb_checkpointer,
    memory_checkpointer,
    mysql_checkpointer,
    objectstorage_checkpointer,
    plainredis_checkpointer,
    postgres_checkpointer,
    sqlite_checkpointer,
    sync_postgres_checkpointer,
    sync_sqlite_checkpointer,
)
from tests.ecosystem.common import Contender, Defect

PROJECT = "langgraph-checkpoint"
TITLE = ("LangGraph checkpointers (`langgraph-checkpoint`, `-sqlite`, `-postgres`, `-mysql`, `-plainredis`, "
         "`-hotkv`, `-objectstorage`, `-lmdb`)")
#: The import names the savers need (tests/ecosystem/test_repros.py skips or fails without them).
REQUIRES = ("langgraph.checkpoint.memory", "langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres",
            "aiosqlite", "psycopg", "langgraph.checkpoint.mysql", "asyncmy", "langgraph_checkpoint_plainredis",
            "langgraph.checkpoint.hotkv", "langgraph_checkpoint_objectstorage", "langgraph_checkpoint_lmdb", "lmdb")
#: What installs every contender's dependencies.
INSTALL = "pip install -e '.[langgraph]'"
#: The distributions whose versions the table records.
DISTRIBUTIONS = ("langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres",
                 "aiosqlite", "psycopg", "langgraph-checkpoint-mysql", "asyncmy", "langgraph-checkpoint-plainredis",
                 "langgraph-checkpoint-hotkv", "hotkv-client", "langgraph-checkpoint-objectstorage", "fsspec",
                 "langgraph-checkpoint-lmdb", "lmdb")
#: The savers not judged here, and why (the section's note).
NOTE = ("Not in this table: `langgraph-checkpoint-duckdb` 2.0.2 requires `langgraph-checkpoint<3` (pinned 4.3.2); "
        "`tox -e langgraph-duckdb` judges it in an environment of its own (`scripts/langgraph_duckdb.py`: 13 of 16 "
        "clauses fail, seed 7: its `aput_writes` takes no `task_path`, it has no `adelete_thread`, `limit=0` lists "
        "one, `setup()` races itself, a DuckDB file opens in one process at a time). `-redis` needs the "
        "RediSearch and RedisJSON modules (the throwaway Redis is plain); `-postgres-pg8000` requires Python "
        "3.12+ (this run: 3.11); `-django` requires `langgraph-checkpoint<3`; `-mysql`'s aiomysql saver fails "
        "its first `aput` with the pinned aiomysql 0.3.2 and PyMySQL 1.2.4 (`TypeError: 'str' object is not "
        "callable` in aiomysql's `escape`), so its asyncmy saver is judged.")

#: The clause that runs the saver in child processes: an in-memory saver has no data there.
IN_ONE_PROCESS = {"put_writes_from_processes_lose_nothing": "the saver keeps its data in one process's memory"}

_MEMORY, _SQLITE, _POSTGRES = "InMemorySaver", "AsyncSqliteSaver (file)", "AsyncPostgresSaver (psycopg)"
_SYNC_SQLITE, _SYNC_POSTGRES = "SqliteSaver (file)", "PostgresSaver (psycopg)"
_MYSQL, _PLAINREDIS, _HOTKV = "AsyncMySaver (mysql, asyncmy)", "AsyncRedisSaver (plainredis)", "AsyncHotKVSaver (redis://)"
_OBJECTS, _LMDB = "ObjectStorageSaver (local files)", "AsyncLMDBSaver (lmdb)"

CONTENDERS = [
    Contender(_MEMORY, PROJECT, lambda: memory_checkpointer, skip=IN_ONE_PROCESS),
    Contender(_SQLITE, "langgraph-checkpoint-sqlite", lambda: sqlite_checkpointer, reopen=True),
    Contender(_POSTGRES, "langgraph-checkpoint-postgres", lambda: postgres_checkpointer, backends=("postgres",),
              reopen=True),
    Contender(_SYNC_SQLITE, "langgraph-checkpoint-sqlite", lambda: sync_sqlite_checkpointer, reopen=True),
    Contender(_SYNC_POSTGRES, "langgraph-checkpoint-postgres", lambda: sync_postgres_checkpointer,
              backends=("postgres",), reopen=True),
    Contender(_MYSQL, "langgraph-checkpoint-mysql", lambda: mysql_checkpointer, backends=("mysql",)),
    Contender(_PLAINREDIS, "langgraph-checkpoint-plainredis", lambda: plainredis_checkpointer, backends=("redis",)),
    Contender(_HOTKV, "langgraph-checkpoint-hotkv", lambda: hotkv_checkpointer, backends=("redis",)),
    Contender(_OBJECTS, "langgraph-checkpoint-objectstorage", lambda: objectstorage_checkpointer),
    Contender(_LMDB, "langgraph-checkpoint-lmdb", lambda: lmdb_checkpointer),
]

#: Measured once, by a loop of 40 calls of the repro's _round() on fresh databases (docs/langgraph.md).
_SETUP_RACE = ("below 1 in 1,000: every one of 40 rounds of four setup() calls on a fresh database failed, and "
               "the repro tries up to 10 rounds")

#: Measured once: each of 20 rounds of four threads' setup() on a fresh database failed (load about 10).
_SYNC_SETUP_RACE = ("below 1 in 10^10: every one of 20 rounds of four setup() calls on a fresh database failed, and "
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
    Defect(_SYNC_SQLITE, "checkpoints_round_trip_exactly", "a bytearray channel value comes back as bytes, as with "
           "AsyncSqliteSaver", "tests/ecosystem/repros/langgraph/sqlite_sync_bytearray_as_bytes.py", True),
    Defect(_SYNC_POSTGRES, "checkpoint_values_keep_nul", "a string channel value with a NUL is refused, as with "
           "AsyncPostgresSaver", "tests/ecosystem/repros/langgraph/postgres_sync_nul_in_a_value.py", True),
    Defect(_SYNC_POSTGRES, "checkpoint_first_calls_on_a_fresh_backend_succeed", "savers starting together on a "
           "fresh database fail setup(), as AsyncPostgresSaver's do",
           "tests/ecosystem/repros/langgraph/postgres_sync_setup_races.py", False, _SYNC_SETUP_RACE),
]

_R = "tests/ecosystem/repros/langgraph/"
#: Measured once each, by loops over the repros' _run() / _round() (numbers in the Defects).
_HOTKV_RACE = ("none of 50 runs: the first round showed it in each run of the repro, which tries up to 200 "
               "rounds")
_OBJECTS_RACE = ("none of 50 runs: the first round showed it in 46 runs of the repro and the second in the other 4; "
                 "it tries up to 200 rounds")
_MYSQL_RACE = ("below 1 in 1,000: every one of 30 rounds of four setup() calls on a fresh database failed, and the "
               "repro tries up to 10 rounds")
_FORK = ("channel versions are the base class's integers and values are kept by (thread, ns, channel, version): a "
         "fork of an older checkpoint, or a second writer, puts its value under the same version and overwrites the "
         "other branch's")
_BY_TASK_ID = ("pending writes sorted by (task_id, idx), not (task_path, task_id, idx) as LangGraph's own savers "
               "give them")
_NO_DELETE = "no delete_thread: adelete_thread is the base class's, which raises NotImplementedError"

DEFECTS += [
    Defect(_MYSQL, "checkpoints_round_trip_exactly", "a bytearray channel value is refused (TypeError: expected bytes, "
           "got bytearray)", _R + "mysql_bytearray_refused.py", True),
    Defect(_MYSQL, "checkpoint_writes_are_idempotent_and_ordered", "pending writes not in (task_path, task_id, idx) "
           "order", _R + "mysql_writes_out_of_order.py", True),
    Defect(_MYSQL, "checkpoint_first_calls_on_a_fresh_backend_succeed", "savers starting together on a fresh database "
           "fail setup() (IntegrityError: Duplicate entry '0' for key 'PRIMARY' in the migration table)",
           _R + "mysql_setup_races.py", False, _MYSQL_RACE),
    Defect(_MYSQL, "delete_thread_removes_only_that_thread", "thread ids that differ only by case are one thread to "
           "adelete_thread (the thread_id columns take the server's case-insensitive collation)",
           _R + "mysql_delete_by_case.py", True),
    Defect(_PLAINREDIS, "checkpoint_threads_and_namespaces_are_isolated", "keys joined as prefix:idx:{thread}:{ns} "
           "unescaped: thread x:b / namespace c and thread x / namespace b:c list each other's checkpoints",
           _R + "plainredis_separator_in_ids.py", True),
    *(Defect(_PLAINREDIS, clause, _FORK, _R + "plainredis_fork_overwrites_a_version.py", True)
      for clause in ("checkpoint_parents_form_a_tree", "checkpoint_handles_putting_to_one_thread_lose_nothing",
                     "checkpointer_matches_model")),
    Defect(_PLAINREDIS, "checkpoint_writes_are_idempotent_and_ordered", _BY_TASK_ID,
           _R + "plainredis_writes_by_task_id.py", True),
    # copy_thread and prune are judged on a tree with a fork (a1 and b1 both from root):
    # b1's value overwrites a1's, so the copy, or the thread prune() was not given, reads b1.
    *(Defect(_HOTKV, clause, _FORK, _R + "hotkv_fork_overwrites_a_version.py", True)
      for clause in ("checkpoint_parents_form_a_tree", "checkpoint_handles_putting_to_one_thread_lose_nothing",
                     "checkpointer_matches_model", "copy_thread_copies_every_checkpoint_and_write",
                     "prune_keeps_each_namespaces_latest_whole")),
    Defect(_HOTKV, "checkpoint_writes_are_idempotent_and_ordered", _BY_TASK_ID, _R + "hotkv_writes_by_task_id.py",
           True),
    Defect(_HOTKV, "delete_racing_put_leaves_no_part", "adelete_thread racing an aput leaves the new checkpoint "
           "without its channel values", _R + "hotkv_delete_racing_put.py", False, _HOTKV_RACE),
    Defect(_OBJECTS, "checkpoints_round_trip_exactly", "a bytearray channel value comes back as bytes",
           _R + "objectstorage_bytearray_as_bytes.py", True),
    Defect(_OBJECTS, "checkpoint_list_filters_before_and_limit", "alist(limit=0) lists one checkpoint (the limit is "
           "checked after each one is yielded)", _R + "objectstorage_limit_zero_lists_one.py", True),
    *(Defect(_OBJECTS, clause, "a thread id outside letters, digits and .:-_ is refused (ValueError: not a valid "
             "path segment)", _R + "objectstorage_thread_id_refused.py", True)
      for clause in ("checkpoint_threads_and_namespaces_are_isolated", "delete_thread_removes_only_that_thread")),
    Defect(_OBJECTS, "checkpoint_writes_are_idempotent_and_ordered", "pending writes not in (task_path, task_id, idx) "
           "order", _R + "objectstorage_writes_out_of_order.py", True),
    Defect(_OBJECTS, "delete_racing_put_leaves_no_part", "adelete_thread racing an aput raises FileNotFoundError or "
           "OSError 'Directory not empty'", _R + "objectstorage_delete_racing_put.py", False, _OBJECTS_RACE),
    Defect(_LMDB, "checkpoints_round_trip_exactly", "a bytearray channel value comes back as bytes",
           _R + "lmdb_bytearray_as_bytes.py", True),
    Defect(_LMDB, "checkpoint_list_filters_before_and_limit", "alist ignores its metadata filter",
           _R + "lmdb_filter_ignored.py", True),
    Defect(_LMDB, "checkpoint_writes_are_idempotent_and_ordered", "pending writes not in (task_path, task_id, idx) "
           "order", _R + "lmdb_writes_out_of_order.py", True),
    *(Defect(_LMDB, clause, _NO_DELETE, _R + "lmdb_no_delete_thread.py", True)
      for clause in ("delete_thread_removes_only_that_thread", "checkpoint_handles_see_each_other_at_once",
                     "delete_racing_put_leaves_no_part", "checkpointer_matches_model")),
]
