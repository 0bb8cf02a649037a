"""LlamaIndex's chat stores (``BaseChatStore`` and ``SQLAlchemyChatStore``), as
``docs/ecosystem.md`` judges them through their own public API with
:func:`storetest.llama_index_chat_stores` and :func:`storetest.llama_index_db_chat_stores`:
outer factories at the top level (the cross-process clause imports them in its
children), the contenders and the defects found, each with a repro in
``repros/llama_index/``. Nothing here imports LlamaIndex at import time.

``llama-index-storage-chat-store-sqlite`` 0.4.0 requires ``aiosqlite<0.22`` and
``-postgres`` 0.5.0 ``asyncpg<0.31``, below the pins the other SDKs need
(``constraints/ecosystem.txt``): neither installs beside them, so neither is in
``storetest[llama-index]``. Their rows were made with each installed ``--no-deps`` over
the pinned drivers; their repros skip where they are not installed (``OPTIONAL``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from storetest import llama_index_chat_stores, llama_index_db_chat_stores, owned
from storetest.bindings.llama_index import NOT_IN_THE_DB_PROTOCOL, NOT_IN_THE_PROTOCOL
from tests.ecosystem.common import Contender, Defect

TITLE = "LlamaIndex (`llama-index-core`, `llama-index-storage-chat-store-*`)"
REQUIRES = ("llama_index.core", "llama_index.storage.chat_store.redis", "sqlalchemy", "aiosqlite", "asyncpg",
            "aiomysql", "redis")
#: Stores that do not install beside the pins (see the module): their repros skip without them.
OPTIONAL = {"llama_index.storage.chat_store.sqlite": "aiosqlite<0.22, pinned 0.22.1",
            "llama_index.storage.chat_store.postgres": "asyncpg<0.31, pinned 0.32.0"}
INSTALL = "pip install -e '.[llama-index]'"
DISTRIBUTIONS = ("llama-index-core", "llama-index-storage-chat-store-sqlite", "llama-index-storage-chat-store-postgres",
                 "llama-index-storage-chat-store-redis", "sqlalchemy", "aiosqlite", "asyncpg", "aiomysql", "redis")

# --- outer factories ------------------------------------------------------------------------

_MEMORY: dict[str, Any] = {}


def simple_store(tmp_path: Path) -> Any:
    """One ``SimpleChatStore`` per directory: the replica is the same object."""
    from llama_index.core.storage.chat_store import SimpleChatStore

    return _MEMORY.setdefault(str(tmp_path), SimpleChatStore())


def simple_neighbour(tmp_path: Path) -> Any:
    from llama_index.core.storage.chat_store import SimpleChatStore

    return _MEMORY.setdefault(f"{tmp_path}/another-app", SimpleChatStore())


def _sqlite(tmp_path: Path, table: str) -> Any:
    from llama_index.storage.chat_store.sqlite import SQLiteChatStore
    from sqlalchemy import create_engine
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
    from sqlalchemy.orm import sessionmaker

    path = tmp_path / "chat.db"
    return SQLiteChatStore(sessionmaker(owned(create_engine(f"sqlite:///{path}"))),
                           async_sessionmaker(owned(create_async_engine(f"sqlite+aiosqlite:///{path}"))), table)


def sqlite_store(tmp_path: Path) -> Any:
    return _sqlite(tmp_path, "chatstore")


def sqlite_neighbour(tmp_path: Path) -> Any:
    return _sqlite(tmp_path, "another_app")


def _postgres(url: str, table: str, use_jsonb: bool) -> Any:
    from llama_index.storage.chat_store.postgres import PostgresChatStore
    from sqlalchemy import create_engine
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    from sqlalchemy.orm import sessionmaker

    sync = owned(create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1)))
    aio = owned(create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1)))
    return PostgresChatStore(sessionmaker(sync), sessionmaker(aio, class_=AsyncSession), table, use_jsonb=use_jsonb)


def postgres_jsonb(storetest_postgres_url: str) -> Any:
    return _postgres(storetest_postgres_url, "chat_jsonb", True)


def postgres_json(storetest_postgres_url: str) -> Any:
    return _postgres(storetest_postgres_url, "chat_json", False)


def postgres_neighbour(storetest_postgres_url: str) -> Any:
    return _postgres(storetest_postgres_url, "another_app", True)


async def redis_store(storetest_redis_url: str) -> AsyncIterator[Any]:
    from llama_index.storage.chat_store.redis import RedisChatStore

    store = RedisChatStore(redis_url=storetest_redis_url)
    yield store
    # It has no close(): its two clients, closed by hand.
    store._redis_client.close()
    await store._aredis_client.aclose()


def _sqlalchemy(url: str, table: str) -> Any:
    from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
    from sqlalchemy.ext.asyncio import create_async_engine

    return SQLAlchemyChatStore(table, async_engine=owned(create_async_engine(url)))


def sqlalchemy_sqlite(tmp_path: Path) -> Any:
    return _sqlalchemy(f"sqlite+aiosqlite:///{tmp_path}/chat.db", "chat")


def sqlalchemy_sqlite_neighbour(tmp_path: Path) -> Any:
    return _sqlalchemy(f"sqlite+aiosqlite:///{tmp_path}/chat.db", "another_app")


def sqlalchemy_postgres(storetest_postgres_url: str) -> Any:
    return _sqlalchemy(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1), "chat")


def sqlalchemy_postgres_neighbour(storetest_postgres_url: str) -> Any:
    return _sqlalchemy(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://", 1), "another_app")


def sqlalchemy_mariadb(storetest_mysql_url: str) -> Any:
    url = storetest_mysql_url.replace("mysql://", "mysql+aiomysql://", 1)
    return _sqlalchemy(url + ("&" if "?" in url else "?") + "charset=utf8mb4", "chat")


# --- the contenders -------------------------------------------------------------------------

_SKIP, _DB_SKIP = dict(NOT_IN_THE_PROTOCOL), dict(NOT_IN_THE_DB_PROTOCOL)

CONTENDERS: tuple[Contender, ...] = (
    # A lambda: an in-memory store cannot be shared with a child process, so the
    # cross-process clause is skipped, saying so.
    Contender("SimpleChatStore", "llama-index-core", lambda: llama_index_chat_stores(
        lambda tmp_path: simple_store(tmp_path), neighbour=simple_neighbour), skip=_SKIP),
    Contender("SQLiteChatStore", "llama-index-storage-chat-store-sqlite",
              lambda: llama_index_chat_stores(sqlite_store, neighbour=sqlite_neighbour), skip=_SKIP),
    Contender("PostgresChatStore (JSONB)", "llama-index-storage-chat-store-postgres",
              lambda: llama_index_chat_stores(postgres_jsonb, neighbour=postgres_neighbour), ("postgres",), skip=_SKIP),
    Contender("PostgresChatStore (JSON)", "llama-index-storage-chat-store-postgres",
              lambda: llama_index_chat_stores(postgres_json, neighbour=postgres_neighbour), ("postgres",), skip=_SKIP),
    Contender("RedisChatStore", "llama-index-storage-chat-store-redis",
              lambda: llama_index_chat_stores(redis_store, neighbour=redis_store), ("redis",), skip=_SKIP),
    Contender("SQLAlchemyChatStore (SQLite)", "llama-index-core", lambda: llama_index_db_chat_stores(
        sqlalchemy_sqlite, neighbour=sqlalchemy_sqlite_neighbour), skip=_DB_SKIP),
    Contender("SQLAlchemyChatStore (PostgreSQL)", "llama-index-core", lambda: llama_index_db_chat_stores(
        sqlalchemy_postgres, neighbour=sqlalchemy_postgres_neighbour), ("postgres",), skip=_DB_SKIP),
    # Its table cannot be created: one clause shows it (every other fails the same way).
    Contender("SQLAlchemyChatStore (MariaDB)", "llama-index-core", lambda: llama_index_db_chat_stores(
        sqlalchemy_mariadb), ("mysql",), clauses=("items_round_trip_exactly",), skip=_DB_SKIP),
)

_REPROS = "tests/ecosystem/repros/llama_index"


def _d(contender: str, clause: str, summary: str, repro: str, deterministic: bool = True,
       miss_rate: str = "") -> Defect:
    return Defect(contender, clause, summary, f"{_REPROS}/{repro}.py", deterministic, miss_rate)


DEFECTS: tuple[Defect, ...] = ()
