"""Broken PostgreSQL stores, on the real throwaway server from ``storetest_postgres_url``.

Each factory makes a schema of its own (``broken_<random>``), applies the variant's DDL
there, and hands the store an asyncpg pool whose ``search_path`` is that schema, so
variants never share tables with each other or with the reference store; the schema
is dropped afterwards. Variants of the take and the save change one method of the
reference :class:`~reference_stores.postgres.PostgresStore`; the jsonb store is a
plain store with the column type that broke the seed Go SDK.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import asyncpg

from reference_stores.postgres import SCHEMA, PostgresStore
from storetest.codec import decode_message, encode_message
from storetest.contract import (
    Message,
    ToolCall,
    check_messages,
    check_session_id,
    check_steer_text,
)
from tests.broken_stores import BrokenStore

# --- the jsonb message column ------------------------------------------------------------

JSONB_SCHEMA = """
CREATE TABLE messages (
    session  bytea   NOT NULL,
    position integer NOT NULL,
    body     jsonb   NOT NULL,
    PRIMARY KEY (session, position)
);
CREATE TABLE steers (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session bytea  NOT NULL,
    text    bytea  NOT NULL
);
"""

# Postgres refuses \u0000 in jsonb ("unsupported Unicode escape sequence"); the usual
# workaround deletes the escape (an unescaped one: "\\u0000" is a backslash and text).
_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _jsonb_body(message: Message) -> str:
    """The message as one JSON document, tool-call arguments embedded as JSON values
    (``json.RawMessage``-style) when they parse, as a string when they do not."""
    parts = []
    for part in message.content:
        if isinstance(part, ToolCall) and _is_json(part.arguments):
            parts.append(
                f'{{"type":"tool_call","id":{json.dumps(part.id)},'
                f'"name":{json.dumps(part.name)},"args":{part.arguments}}}'
            )
        else:
            encoded = json.loads(encode_message(Message(message.role, (part,))))
            parts.append(json.dumps(encoded["content"][0]))
    body = f'{{"role":{json.dumps(message.role)},"content":[{",".join(parts)}]}}'
    return _NUL_ESCAPE.sub(r"\1", body)


def _from_jsonb(body: str) -> Message:
    document = json.loads(body)
    for part in document["content"]:
        if "args" in part:
            # The Python value asyncpg's jsonb text decodes to, dumped again.
            part["arguments"] = json.dumps(part.pop("args"), ensure_ascii=False)
    return decode_message(json.dumps(document))


class JsonbMessagesStore:
    """Messages stored as ``jsonb`` documents, tool-call arguments embedded as JSON.

    ``jsonb`` keeps the last duplicate key, sorts keys shorter-first, normalizes
    whitespace and numbers, decodes escapes: the model's raw arguments come back
    rewritten. In the wild: the seed Go SDK's Postgres store (the regression it
    shipped), LangChain-style stores whose message JSON holds parsed ``args``,
    SQLAlchemy ``JSONB`` columns. Saves and takes are otherwise correct (one
    transaction each).
    """

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        key = check_session_id(session).encode("utf-8")
        new = check_messages(messages)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM messages WHERE session = $1", key)
            await conn.executemany(
                "INSERT INTO messages (session, position, body) VALUES ($1, $2, $3::jsonb)",
                [(key, i, _jsonb_body(m)) for i, m in enumerate(new)],
            )

    async def messages(self, session: str) -> list[Message]:
        key = check_session_id(session).encode("utf-8")
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT body FROM messages WHERE session = $1 ORDER BY position", key
            )
        return [_from_jsonb(r["body"]) for r in rows]

    async def add_steer(self, session: str, text: str) -> None:
        key = check_session_id(session).encode("utf-8")
        data = check_steer_text(text).encode("utf-8")
        async with self._pool.acquire() as conn:
            await conn.execute("INSERT INTO steers (session, text) VALUES ($1, $2)", key, data)

    async def take_steers(self, session: str) -> list[str]:
        key = check_session_id(session).encode("utf-8")
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))",
                               key.hex())
            rows = await conn.fetch(
                "WITH d AS (DELETE FROM steers WHERE session = $1 RETURNING id, text) "
                "SELECT text FROM d ORDER BY id", key
            )
        return [bytes(r["text"]).decode("utf-8") for r in rows]


# --- variants of the reference store -----------------------------------------------------


class UnlockedTakeStore(PostgresStore):
    """``take_steers`` selects the queued steers, then deletes them by id, with no lock
    and no transaction: two replicas both read the same steers.

    In the wild: the take every tutorial writes first (``SELECT ... ORDER BY id`` then
    ``DELETE ... WHERE id = ANY(...)``), also inside a READ COMMITTED transaction
    without ``FOR UPDATE``.
    """

    async def take_steers(self, session: str) -> list[str]:
        key = check_session_id(session).encode("utf-8")
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT id, text FROM storetest_steers WHERE session = $1 ORDER BY id", key
            )
            if rows:
                await conn.execute("DELETE FROM storetest_steers WHERE id = ANY($1::bigint[])",
                                   [r["id"] for r in rows])
        return [bytes(r["text"]).decode("utf-8") for r in rows]


class UnorderedReturningStore(PostgresStore):
    """``take_steers`` trusts the order of the rows a ``DELETE ... RETURNING`` hands back,
    through a ``SELECT DISTINCT`` meant to guard against duplicates: nothing orders the
    result, and Postgres hashes the rows, so they come out in hash order.

    In the wild: the seed Go SDK's take (``DELETE ... RETURNING`` with no ``ORDER BY``).
    On a small, freshly written table Postgres happens to return heap order, which is
    insertion order, until updates, vacuum or a different plan change it; the
    ``DISTINCT`` (which plans as a HashAggregate) stands in for that, so the
    misordering shows on every run instead of once in production.
    """

    async def take_steers(self, session: str) -> list[str]:
        key = check_session_id(session).encode("utf-8")
        async with self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(
                "SELECT 1 FROM storetest_sessions WHERE session = $1 FOR UPDATE", key
            ) is None:
                return []
            rows = await conn.fetch(
                "WITH d AS (DELETE FROM storetest_steers WHERE session = $1 RETURNING id, text) "
                "SELECT DISTINCT id, text FROM d", key
            )
        return [bytes(r["text"]).decode("utf-8") for r in rows]


UNSAFE_SAVE_SCHEMA = """
CREATE TABLE messages (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session bytea NOT NULL,
    body    text  NOT NULL
);
CREATE INDEX ON messages (session, id);
"""


class DeleteThenInsertStore(PostgresStore):
    """``save`` deletes the session's messages and inserts the new ones as two
    autocommitted statements, outside one transaction: concurrent saves interleave into
    a doubled transcript, and a reader between them sees an empty one.

    In the wild: drivers and pools in autocommit mode (asyncpg's default outside
    ``conn.transaction()``, Go's ``db.Exec`` on a ``*sql.DB``), a forgotten ``BEGIN``.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        key = check_session_id(session).encode("utf-8")
        new = check_messages(messages)
        async with self._pool.acquire() as conn:
            await conn.execute("DELETE FROM messages WHERE session = $1", key)
            await conn.executemany(
                "INSERT INTO messages (session, body) VALUES ($1, $2)",
                [(key, encode_message(m)) for m in new],
            )

    async def messages(self, session: str) -> list[Message]:
        key = check_session_id(session).encode("utf-8")
        async with self._pool.acquire() as conn:
            rows = await conn.fetch("SELECT body FROM messages WHERE session = $1 ORDER BY id", key)
        return [decode_message(r["body"]) for r in rows]


# --- factories ---------------------------------------------------------------------------


UPSERT_SCHEMA = """
CREATE TABLE messages (
    session  bytea   NOT NULL,
    position integer NOT NULL,
    body     text    NOT NULL,
    PRIMARY KEY (session, position)
);
CREATE TABLE steers (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session bytea  NOT NULL,
    text    bytea  NOT NULL
);
"""


class UnorderedReadStore(JsonbMessagesStore):
    """Saves update changed rows in place (an upsert per position) and reads them back
    with no ``ORDER BY``.

    An updated row is a new tuple at the end of the heap, so after the first message
    is rewritten a sequential scan returns it last. In the wild: a SQLAlchemy store
    written from the contract that forgot ``order_by`` in ``messages()``; it passes on
    SQLite, whose rowid order happens to match.
    """

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        key = check_session_id(session).encode("utf-8")
        new = check_messages(messages)
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("DELETE FROM messages WHERE session = $1 AND position >= $2", key, len(new))
            await conn.executemany(
                "INSERT INTO messages (session, position, body) VALUES ($1, $2, $3) "
                "ON CONFLICT (session, position) DO UPDATE SET body = EXCLUDED.body "
                "WHERE messages.body IS DISTINCT FROM EXCLUDED.body",
                [(key, i, encode_message(m)) for i, m in enumerate(new)],
            )

    async def messages(self, session: str) -> list[Message]:
        key = check_session_id(session).encode("utf-8")
        async with self._pool.acquire() as conn:
            rows = await conn.fetch("SELECT body FROM messages WHERE session = $1", key)
        return [decode_message(r["body"]) for r in rows]


async def _in_fresh_schema(
    url: str, ddl: str, make: Callable[[Any], Any]
) -> AsyncIterator[Any]:
    schema = f"broken_{secrets.token_hex(5)}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"CREATE SCHEMA {schema}")
        await admin.execute(f"SET search_path TO {schema}")
        await admin.execute(ddl)
        pool = await asyncpg.create_pool(url, min_size=1, max_size=10,
                                         server_settings={"search_path": schema})
        try:
            yield make(pool)
        finally:
            await pool.close()
    finally:
        try:
            await admin.execute(f"DROP SCHEMA {schema} CASCADE")
        finally:
            await admin.close()


async def jsonb_messages_store(storetest_postgres_url: str) -> AsyncIterator[Any]:
    async for store in _in_fresh_schema(storetest_postgres_url, JSONB_SCHEMA, JsonbMessagesStore):
        yield store


async def unlocked_take_store(storetest_postgres_url: str) -> AsyncIterator[Any]:
    async for store in _in_fresh_schema(storetest_postgres_url, SCHEMA, UnlockedTakeStore):
        yield store


async def unordered_returning_store(storetest_postgres_url: str) -> AsyncIterator[Any]:
    async for store in _in_fresh_schema(storetest_postgres_url, SCHEMA, UnorderedReturningStore):
        yield store


async def delete_then_insert_store(storetest_postgres_url: str) -> AsyncIterator[Any]:
    async for store in _in_fresh_schema(
        storetest_postgres_url, SCHEMA + UNSAFE_SAVE_SCHEMA, DeleteThenInsertStore
    ):
        yield store


async def unordered_read_store(storetest_postgres_url: str) -> AsyncIterator[Any]:
    async for store in _in_fresh_schema(storetest_postgres_url, UPSERT_SCHEMA, UnorderedReadStore):
        yield store


BROKEN: list[BrokenStore] = [
    BrokenStore(
        "postgres-read-without-order-by",
        "saves upsert changed rows in place; messages() has no ORDER BY",
        "a SQLAlchemy store that forgot order_by (passes on SQLite)",
        "long_histories_keep_every_save", "messages came back in another order",
        unordered_read_store,
    ),
    BrokenStore(
        "postgres-jsonb-messages",
        "messages in a jsonb column, tool-call arguments embedded as JSON",
        "the seed Go SDK's Postgres store; SQLAlchemy JSONB / LangChain parsed args",
        "tool_arguments_are_kept_verbatim", "raw JSON re-encoded",
        jsonb_messages_store,
    ),
    BrokenStore(
        "postgres-unlocked-take",
        "take SELECTs the steers, then DELETEs them by id, no lock or transaction",
        "the first take everyone writes; READ COMMITTED without FOR UPDATE",
        "steers_are_taken_exactly_once_under_concurrency", "duplicated",
        unlocked_take_store, racy=True,
    ),
    BrokenStore(
        "postgres-returning-unordered",
        "take returns DELETE ... RETURNING rows with no ORDER BY (hash order via DISTINCT)",
        "the seed Go SDK's take: RETURNING order is unspecified",
        "steers_are_taken_in_order_exactly_once", "steers out of order",
        unordered_returning_store,
    ),
    BrokenStore(
        "postgres-save-outside-transaction",
        "save DELETEs then INSERTs as two autocommitted statements",
        "autocommit drivers (asyncpg outside transaction(), Go's db.Exec); a forgotten BEGIN",
        "concurrent_saves_leave_one_transcript", "transcript torn",
        delete_then_insert_store, racy=True,
    ),
]
