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
from storetest.chat_history_binding import NO_SESSION_IDS, NOT_IN_THE_PROTOCOL
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
    # A lambda: an in-memory history cannot be shared with a child process, so the
    # cross-process clause is skipped, saying so.
    Contender("InMemoryChatMessageHistory", "langchain-core",
              lambda: chat_histories(lambda tmp_path: _memory_opener(tmp_path), session_ids=False), skip=_NO_IDS),
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

DEFECTS: tuple[Defect, ...] = ()
