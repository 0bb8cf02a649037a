"""LangChain's chat histories (``BaseChatMessageHistory``), as ``docs/ecosystem.md`` judges
them through their own public API with :func:`storetest.chat_histories`: outer factories
defined at the top level (the cross-process clause imports them in its children), the
contenders and the defects found, each with a repro in ``repros/langchain/``. Nothing
here imports LangChain at import time; a binding imports what it needs when called.
Install what they need with ``pip install -e '.[langchain]'``."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from storetest import chat_histories, owned
from storetest.bindings.langchain import NO_SESSION_IDS, NOT_IN_THE_PROTOCOL
from tests.ecosystem.common import Contender, Defect

TITLE = "LangChain (`langchain-core`, `langchain-community`, `langchain-postgres`)"
#: The import names the stores need (tests/ecosystem/test_repros.py skips or fails without them).
REQUIRES = ("langchain_core", "langchain_community", "langchain_postgres", "psycopg", "sqlalchemy", "pymysql",
            "redis")
INSTALL = "pip install -e '.[langchain]'"
DISTRIBUTIONS = ("langchain-core", "langchain-community", "langchain-postgres", "psycopg", "sqlalchemy",
                 "pymysql", "redis")

# --- outer factories: one handle on a backend each -------------------------------------------

_MEMORY: dict[str, dict[str, Any]] = {}


def _memory_opener(tmp_path: Path) -> Callable[[str], Any]:
    # One object is one history: both handles of a run share the objects of its directory.
    from langchain_core.chat_history import InMemoryChatMessageHistory

    objects = _MEMORY.setdefault(str(tmp_path), {})
    return lambda session_id: objects.setdefault(session_id, InMemoryChatMessageHistory())


def file_opener(tmp_path: Path) -> Callable[[str], Any]:
    """One file is one history: a file per id, named by the id's hash (the test's mapping)."""
    from langchain_community.chat_message_histories import FileChatMessageHistory

    return lambda session_id: FileChatMessageHistory(
        str(tmp_path / f"{hashlib.sha256(session_id.encode('utf-8', 'surrogatepass')).hexdigest()}.json"))


def _sql_opener(url: str) -> Callable[[str], Any]:
    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from sqlalchemy import create_engine

    return partial(SQLChatMessageHistory, connection=owned(create_engine(url)))


def sql_sqlite_opener(tmp_path: Path) -> Callable[[str], Any]:
    return _sql_opener(f"sqlite:///{tmp_path}/chat.db")


def sql_postgres_opener(storetest_postgres_url: str) -> Callable[[str], Any]:
    return _sql_opener(storetest_postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))


def sql_mariadb_opener(storetest_mysql_url: str) -> Callable[[str], Any]:
    url = storetest_mysql_url.replace("mysql://", "mysql+pymysql://", 1)
    return _sql_opener(url + ("&" if "?" in url else "?") + "charset=utf8mb4")


def redis_opener(storetest_redis_url: str, storetest_redis_prefix: str) -> Callable[[str], Any]:
    from langchain_community.chat_message_histories import RedisChatMessageHistory

    return partial(RedisChatMessageHistory, url=storetest_redis_url, key_prefix=storetest_redis_prefix)


#: langchain-postgres takes UUID session ids only; the opener maps each id to one.
UUID_IDS = "session ids are UUIDs only: the opener maps each id to uuid5(id), so the id clauses judge UUIDs"


def pg_history_opener(storetest_postgres_url: str) -> Callable[[str], Any]:
    import psycopg
    from langchain_postgres import PostgresChatMessageHistory

    connection = owned(psycopg.connect(storetest_postgres_url))
    PostgresChatMessageHistory.create_tables(connection, "chat_history")
    return lambda session_id: PostgresChatMessageHistory(
        "chat_history", str(uuid.uuid5(uuid.NAMESPACE_URL, session_id)), sync_connection=connection)


# --- the contenders -------------------------------------------------------------------------

#: Shown as n/a in the table: what LangChain's protocol has no method for (the binding skips it too).
_SKIP = dict(NOT_IN_THE_PROTOCOL)
_NO_IDS = {**_SKIP, "item_sessions_are_isolated": NO_SESSION_IDS}

CONTENDERS: tuple[Contender, ...] = (
    # An in-memory history cannot be shared with a child process (a forked one has a copy):
    # the cross-process clause is skipped, saying so.
    Contender("InMemoryChatMessageHistory", "langchain-core",
              lambda: chat_histories(lambda tmp_path: _memory_opener(tmp_path), session_ids=False),
              skip={**_NO_IDS, "adds_from_processes_land_whole": "an in-memory history lives in one process"}),
    Contender("FileChatMessageHistory", "langchain-community",
              lambda: chat_histories(file_opener, session_ids=False), skip=_NO_IDS),
    Contender("SQLChatMessageHistory (SQLite)", "langchain-community",
              lambda: chat_histories(sql_sqlite_opener), skip=_SKIP),
    Contender("SQLChatMessageHistory (PostgreSQL)", "langchain-community",
              lambda: chat_histories(sql_postgres_opener), ("postgres",), skip=_SKIP),
    Contender("SQLChatMessageHistory (MariaDB)", "langchain-community",
              lambda: chat_histories(sql_mariadb_opener), ("mysql",), skip=_SKIP),
    Contender("RedisChatMessageHistory", "langchain-community",
              lambda: chat_histories(redis_opener), ("redis",), skip=_SKIP),
    Contender("PostgresChatMessageHistory", "langchain-postgres",
              lambda: chat_histories(pg_history_opener, session_ids=UUID_IDS), ("postgres",), skip=_SKIP),
)

_REPROS = "tests/ecosystem/repros/langchain"
_MEM, _FILE = "InMemoryChatMessageHistory", "FileChatMessageHistory"
_SQLITE, _SQLPG, _MARIA = ("SQLChatMessageHistory (SQLite)", "SQLChatMessageHistory (PostgreSQL)",
                           "SQLChatMessageHistory (MariaDB)")
_REDIS, _PGH = "RedisChatMessageHistory", "PostgresChatMessageHistory"
_TORN_MISSES = ("below 1 in 10,000 (measured: 20 of 20 runs tore a read in their first round; the loop runs up to "
                "200 rounds)")


def _d(contender: str, clause: str, summary: str, repro: str, deterministic: bool = True,
       miss_rate: str = "") -> Defect:
    return Defect(contender, clause, summary, f"{_REPROS}/{repro}.py", deterministic, miss_rate)


DEFECTS: tuple[Defect, ...] = (
    _d(_MEM, "items_are_not_aliased", "Keeps the caller's message objects and returns its own list: changing "
       "a message after add_messages, or appending to what messages returned, changes the history (beyond the "
       "protocol's promise: LangChain does not document either way).", "in_memory_shares_messages"),
    _d(_FILE, "a_batch_is_atomic_to_readers", "add_messages rewrites the file once per message: a reader between "
       "two sees part of the batch (beyond the protocol's promise), and a read during a rewrite finds the file "
       "truncated (JSONDecodeError).", "file_batch_in_part"),
    _d(_FILE, "concurrent_batches_never_interleave", "Each add reads the file, appends and writes it back with no "
       "lock: a batch another handle adds in between is overwritten and lost.", "file_lost_update"),
    _d(_FILE, "concurrent_adds_lose_nothing", "Read-modify-write of the whole file with no lock: concurrent adds "
       "lose messages (or raise JSONDecodeError on a truncated file after writing part of a batch).",
       "file_lost_update"),
    _d(_FILE, "clear_racing_add_lands_before_or_after", "An add that read the file before a clear writes the old "
       "messages back with the new: the clear is undone.", "file_clear_lost"),
    _d(_FILE, "first_calls_on_a_fresh_backend_succeed", "The constructor creates an empty file, then writes []; "
       "writes truncate, then write: a first read in between raises JSONDecodeError.", "file_torn_read",
       False, _TORN_MISSES),
    _d(_FILE, "adds_from_processes_land_whole", "A writer in another process reads a file mid-rewrite and raises "
       "JSONDecodeError (the file is truncated, then written).", "file_torn_read", False, _TORN_MISSES),
    _d(_SQLITE, "adds_from_processes_land_whole", "The constructor creates the table by check-then-CREATE TABLE: "
       "another process creating it in between makes it raise 'table message_store already exists'.",
       "sql_sqlite_create_table_race"),
    _d(_SQLITE, "first_calls_on_a_fresh_backend_succeed", "Constructors racing on a fresh file: create_all "
       "checks for the table, then creates it, and a second constructor's CREATE TABLE raises 'table message_store "
       "already exists'.", "sql_sqlite_create_table_race"),
    # The k racers of these clauses each construct a history of their own on a fresh file.
    *(_d(_SQLITE, clause, "Racers constructing histories on a fresh file: create_all checks for the table, then "
         "creates it, and a second constructor raises 'table message_store already exists'.",
         "sql_sqlite_create_table_race") for clause in ("concurrent_batches_never_interleave",
                                                         "concurrent_adds_lose_nothing")),
    _d(_SQLPG, "first_calls_on_a_fresh_backend_succeed", "Constructors racing on a fresh database: create_all "
       "checks for the table, then creates it, and a second constructor's CREATE TABLE raises 'relation "
       "message_store already exists' (or PostgreSQL's catalog refuses the second type: pg_type_typname_nsp_index).",
       "sql_postgres_create_table_race"),
    _d(_MARIA, "first_calls_on_a_fresh_backend_succeed", "Constructors racing on a fresh database: create_all "
       "checks for the table, then creates it, and a second constructor's CREATE TABLE raises 'Table "
       "message_store already exists' (1050).", "sql_mariadb_create_table_race"),
    _d(_SQLPG, "clear_racing_add_lands_before_or_after", "Several adders' batches racing a clear interleave: each "
       "batch is one transaction, but rows are read ORDER BY a SERIAL id that concurrent inserts draw in turn "
       "(beyond the protocol's promise).", "sql_postgres_batches_interleave"),
    _d(_SQLPG, "concurrent_batches_never_interleave", "Two replicas' concurrent batches interleave: each batch is "
       "one transaction, but rows are read ORDER BY a SERIAL id that concurrent inserts draw in turn (beyond the "
       "protocol's promise).", "sql_postgres_batches_interleave"),
    _d(_SQLPG, "a_batch_is_atomic_to_readers", "Two concurrent batches interleave (SERIAL ids drawn in turn), "
       "which a reader racing them sees (beyond the protocol's promise).", "sql_postgres_batches_interleave"),
    _d(_SQLPG, "adds_from_processes_land_whole", "Batches from writers in several processes interleave (SERIAL "
       "ids drawn in turn by concurrent transactions).", "sql_postgres_batches_interleave"),
    _d(_MARIA, "item_sessions_are_isolated", "session_id is TEXT under MariaDB's default collation: ids that "
       "differ by case or trailing spaces are one history.", "mariadb_ids_merge"),
    _d(_MARIA, "item_history_matches_model", "Sessions x and X share messages (the same case-insensitive "
       "session_id column).", "mariadb_ids_merge"),
    _d(_MARIA, "item_related_ids_stay_apart", "Ids that differ by case or trailing whitespace are one history "
       "(the same case-insensitive, PAD SPACE session_id column).", "mariadb_ids_merge"),
    _d(_MARIA, "large_items_round_trip", "The message column is TEXT (65,535 bytes): a longer message is "
       "refused, 'Data too long for column message'.", "mariadb_64k_messages"),
    _d(_MARIA, "item_fields_round_trip_at_every_size", "The message column is TEXT (65,535 bytes): a message past "
       "it on the size ladder is refused, 'Data too long for column message'.", "mariadb_64k_messages"),
    _d(_REDIS, "a_batch_is_atomic_to_readers", "add_messages is BaseChatMessageHistory's default, one LPUSH per "
       "message: a reader between two sees part of the batch (beyond the protocol's promise).",
       "redis_batch_in_part"),
    _d(_REDIS, "concurrent_batches_never_interleave", "One LPUSH per message: another replica's batch lands "
       "inside this one (beyond the protocol's promise).", "redis_batches_interleave"),
    _d(_REDIS, "clear_racing_add_lands_before_or_after", "One LPUSH per message: a clear between two leaves the "
       "batch's tail, neither empty nor the whole batch.", "redis_clear_inside_a_batch"),
    _d(_REDIS, "adds_from_processes_land_whole", "One LPUSH per message: a reader in another process sees part "
       "of a batch, and writers' batches interleave.", "redis_batch_in_part"),
    _d(_PGH, "items_keep_nul_characters", "A message with a NUL is refused by the jsonb column, and the failed "
       "transaction is not rolled back: every later call on the caller's connection raises "
       "InFailedSqlTransaction.", "pg_history_nul_poisons_connection"),
    _d(_PGH, "items_round_trip_exactly", "Messages go through jsonb, which keeps numbers as numeric: the float "
       "1e300 in response_metadata comes back as a 301-digit integer.", "pg_history_jsonb_numbers"),
    _d(_PGH, "item_history_matches_model", "jsonb numbers: the float 1e300 in a message comes back as an "
       "integer.", "pg_history_jsonb_numbers"),
    _d(_PGH, "concurrent_batches_never_interleave", "Two replicas' concurrent batches interleave: rows are read "
       "ORDER BY a SERIAL id that concurrent inserts draw in turn (beyond the protocol's promise).",
       "pg_history_batches_interleave"),
    _d(_PGH, "adds_from_processes_land_whole", "Batches from writers in several processes interleave (SERIAL ids "
       "drawn in turn).", "pg_history_batches_interleave"),
    _d(_PGH, "clear_racing_add_lands_before_or_after", "Several adders' batches racing a clear interleave: rows are "
       "read ORDER BY a SERIAL id that concurrent inserts draw in turn (beyond the protocol's promise).",
       "pg_history_batches_interleave"),
)
