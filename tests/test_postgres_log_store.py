"""The PostgreSQL log store's own promises, beyond the conformance suite: idempotent
DDL with no ``jsonb`` and no ``timestamptz``, least privilege, values at the edges
(NUL ids, year 1 at +14:00), and errors that name the session."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from storetest.contract import Message, StoreError
from storetest.entries import Entry
from tests.test_log_stores import EDGE_ENTRIES
from tests.test_postgres_store import _as_user

asyncpg = pytest.importorskip("asyncpg")

from reference_stores.postgres_log import SCHEMA, PostgresLogStore  # noqa: E402

T = TypeVar("T")
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def run(main: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(main())  # type: ignore[arg-type]


def msg(entry_id: str, parent: str | None = None) -> Entry:
    return Entry.message(entry_id, parent, T0, Message.text("user", entry_id))


def test_schema_applies_twice_and_holds_no_jsonb_or_timestamptz(storetest_postgres_url: str) -> None:
    async def main() -> dict[str, str]:
        conn = await asyncpg.connect(storetest_postgres_url)
        try:
            await conn.execute(SCHEMA)
            await conn.execute(SCHEMA)
            rows = await conn.fetch(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'storetest_log_entries'")
            return {r["column_name"]: r["data_type"] for r in rows}
        finally:
            await conn.close()

    types = run(main)
    assert types["payload"] == "text" and types["id"] == "bytea" and types["created_us"] == "bigint"
    assert not {"jsonb", "json", "timestamp with time zone"} & set(types.values())


def test_values_at_the_edges_come_back_exactly(storetest_postgres_url: str) -> None:
    edge = list(EDGE_ENTRIES)

    async def main() -> tuple[list[Entry], list[Entry]]:
        pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)
            store = PostgresLogStore(pool)
            session = f"s\x00{secrets.token_hex(4)}"
            await store.append(session, edge)
            return await store.entries(session), await store.entries(session.replace("\x00", ""))
        finally:
            await pool.close()

    assert run(main) == (edge, [])


def test_a_role_with_only_dml_rights_can_use_the_store(storetest_postgres_url: str) -> None:
    """The store runs no DDL: SELECT, INSERT, UPDATE, DELETE on its two tables suffice."""
    role = f"storetest_log_{secrets.token_hex(4)}"
    session = f"s-{secrets.token_hex(4)}"

    async def main() -> tuple[list[Entry], bool]:
        admin = await asyncpg.connect(storetest_postgres_url)
        try:
            await admin.execute(SCHEMA)
            database = await admin.fetchval("SELECT current_database()")
            try:
                await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
            except asyncpg.InsufficientPrivilegeError:
                pytest.skip("the test database's user may not create roles")
            await admin.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {role}')
            await admin.execute(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
            await admin.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
            await admin.execute(f"REVOKE CREATE ON SCHEMA public FROM {role}, PUBLIC")
            await admin.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON storetest_log_sessions, storetest_log_entries TO {role}")
            app = await asyncpg.create_pool(_as_user(storetest_postgres_url, role), min_size=1, max_size=2)
            try:
                async with app.acquire() as conn:
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.execute("CREATE TABLE storetest_forbidden (x int)")
                store = PostgresLogStore(app)
                await store.append(session, [msg("a")])
                created = await store.create(session + "-new", [msg("b")])
                await store.append(session, [msg("c", "a")])
                return await store.entries(session), created
            finally:
                await app.close()
        finally:
            await admin.execute(f"DROP OWNED BY {role}")
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
            await admin.close()

    log, created = run(main)
    assert [e.id for e in log] == ["a", "c"] and created


def test_errors_name_the_operation_and_the_session(storetest_postgres_url: str) -> None:
    async def main() -> Any:
        pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)
        store = PostgresLogStore(pool)
        await pool.close()
        with pytest.raises(StoreError, match="append to session 'gone' failed: the pool is closed"):
            await store.append("gone", [msg("a")])
        with pytest.raises(StoreError, match="read of session 'gone' failed"):
            await store.entries("gone")

    run(main)


def test_a_refused_append_reserves_nothing_and_an_application_transaction_is_refused(
    storetest_postgres_url: str,
) -> None:
    """An append is one autocommitted statement that writes only when its checks pass: a
    refused one must leave no session row behind (a row with a length would make the
    next ``create`` return False for a session with no entries), and it must not run
    inside a transaction the application left open (the app's ROLLBACK would undo it)."""
    async def main() -> tuple[Any, ...]:
        pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)
            store = PostgresLogStore(pool)
            session = f"refused-{secrets.token_hex(4)}"
            with pytest.raises(ValueError, match="has parent 'nowhere'"):
                await store.append(session, [msg("a", "nowhere")])
            await store.append(session, [msg("b")])
            with pytest.raises(ValueError, match="the session already has"):
                await store.append(session, [msg("c", "b"), msg("b")])
            row = await pool.fetchval(
                "SELECT length FROM storetest_log_sessions WHERE session = $1", session.encode())
            fresh = f"fresh-{secrets.token_hex(4)}"
            with pytest.raises(ValueError):
                await store.append(fresh, [msg("x", "nowhere")])
            created = await store.create(fresh, [msg("x")])

            class InTransaction:
                def __init__(self, conn: Any) -> None:
                    self.conn = conn

                def acquire(self, timeout: float | None = None) -> Any:
                    outer = self

                    class _Held:
                        async def __aenter__(self) -> Any:
                            return outer.conn

                        async def __aexit__(self, *_: object) -> None:
                            return None

                    return _Held()

            async with pool.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                with pytest.raises(StoreError, match="inside a transaction the application opened"):
                    await PostgresLogStore(InTransaction(conn)).append(session, [msg("d", "b")])
                await tx.rollback()
            return row, created, [e.id for e in await store.entries(session)]
        finally:
            await pool.close()

    length, created, ids = run(main)
    assert (length, created, ids) == (1, True, ["b"])


def test_a_refused_append_names_the_fault_check_batch_names(storetest_postgres_url: str) -> None:
    """The append checks on the server, in its one statement, and names the refusal
    from the ids it found: every bad batch must be refused with the very message
    ``check_batch`` gives with the whole session at hand (the memory store's), including
    the batches whose fault depends on both the batch and the session."""
    from reference_stores.memory_log import MemoryLogStore

    bad = [
        [msg("x", "nowhere")],
        [msg("a")],
        [msg("x", "a"), msg("x", "a")],
        [msg("x", "nowhere"), msg("x")],
        [msg("x", "y"), msg("y")],
        [msg("x", "a"), msg("y", "z"), msg("z")],
        [msg("x", "b"), msg("b")],
    ]

    async def main() -> list[tuple[str, str]]:
        pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)
            ours, model = PostgresLogStore(pool), MemoryLogStore()
            session = f"named-{secrets.token_hex(4)}"
            for store in (ours, model):
                await store.append(session, [msg("a"), msg("b", "a")])
            found = []
            for batch in bad:
                said = []
                for store in (ours, model):
                    with pytest.raises(ValueError) as caught:
                        await store.append(session, batch)
                    said.append(str(caught.value))
                found.append((said[0], said[1]))
            assert [e.id for e in await ours.entries(session)] == ["a", "b"]
            return found
        finally:
            await pool.close()

    for ours_said, model_said in run(main):
        assert ours_said == model_said


def test_an_append_without_an_answer_is_an_unknown_outcome(storetest_postgres_url: str) -> None:
    """An append is a statement that commits by itself: once it is sent, no answer
    within the timeout (here it waits on the session row, locked by another
    transaction) means it may have landed, which only ``OutcomeUnknown`` says; the
    handle works again afterwards."""
    from storetest.contract import OutcomeUnknown

    async def main() -> list[str]:
        pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        blocker = await asyncpg.connect(storetest_postgres_url)
        try:
            async with pool.acquire() as conn:
                await conn.execute(SCHEMA)
            session = f"stalled-{secrets.token_hex(4)}"
            store = PostgresLogStore(pool, timeout=0.5)
            await store.append(session, [msg("a")])
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute("SELECT 1 FROM storetest_log_sessions WHERE session = $1 FOR UPDATE",
                                  session.encode())
            with pytest.raises(OutcomeUnknown, match=rf"append to session '{session}' may or may not have taken "
                               r"effect: its statement \(which commits by itself\) got no answer"):
                await store.append(session, [msg("b", "a")])
            await tx.rollback()
            await store.append(session, [msg("c", "a")])
            return [e.id for e in await store.entries(session)]
        finally:
            await blocker.close()
            await pool.close()

    assert run(main) in (["a", "c"], ["a", "b", "c"])


class _CountingPool:
    """An asyncpg pool that counts what the store takes from it and gives back, and the
    resets the pool runs as connections come back (its ``reset`` callback)."""

    def __init__(self) -> None:
        self.pool: Any = None
        self.acquired = self.released = self.resets = 0

    async def open(self, url: str, **kwargs: Any) -> _CountingPool:
        async def reset(conn: Any) -> None:
            self.resets += 1
            await conn.reset()

        self.pool = await asyncpg.create_pool(url, reset=reset, **kwargs)
        return self

    def acquire(self, *, timeout: float | None = None) -> Any:
        self.acquired += 1
        return _Acquiring(self, self.pool.acquire(timeout=timeout))

    async def release(self, conn: Any, *, timeout: float | None = None) -> None:
        self.released += 1
        await self.pool.release(conn, timeout=timeout)


class _Acquiring:
    """What ``_CountingPool.acquire`` returns: awaited (a held connection) or entered
    (a connection per call), as asyncpg's own."""

    def __init__(self, counting: _CountingPool, acquiring: Any) -> None:
        self.counting, self.acquiring = counting, acquiring

    def __await__(self) -> Any:
        return self.acquiring.__await__()

    async def __aenter__(self) -> Any:
        return await self.acquiring.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        self.counting.released += 1
        await self.acquiring.__aexit__(*exc)


def test_a_held_connection_serves_every_call_with_no_reset_between_them(storetest_postgres_url: str) -> None:
    """``hold_connection=True``: one connection taken from the pool at the first call,
    no hand-off and no reset between calls (concurrent calls take turns on it and all
    land), given back (and reset by the pool, once) at ``aclose``, after which a call
    raises StoreError naming it; the pool then closes without waiting."""

    async def main() -> None:
        counting = await _CountingPool().open(storetest_postgres_url, min_size=1, max_size=2)
        async with counting.pool.acquire() as conn:
            await conn.execute(SCHEMA)
        resets_before = counting.resets
        session = f"held-{secrets.token_hex(4)}"
        store = PostgresLogStore(counting, hold_connection=True)
        assert "hold_connection=True" in repr(store)
        await store.append(session, [msg("a")])
        assert await store.create(session, [msg("x")]) is False
        await asyncio.gather(*(store.append(f"{session}-{i}", [msg("a"), msg("b", "a")]) for i in range(20)))
        assert [e.id for e in await store.entries(session)] == ["a"]
        assert [[e.id for e in await store.entries(f"{session}-{i}")] for i in range(20)] == [["a", "b"]] * 20
        assert (counting.acquired, counting.released, counting.resets - resets_before) == (1, 0, 0)
        await store.aclose()
        await store.aclose()  # harmless twice
        assert (counting.acquired, counting.released, counting.resets - resets_before) == (1, 1, 1)
        with pytest.raises(StoreError, match=rf"append to session '{session}' failed: the store was closed"):
            await store.append(session, [msg("b", "a")])
        await asyncio.wait_for(counting.pool.close(), 10)  # nothing is still held

        # The default takes and gives back a connection per call, reset every time.
        counting = await _CountingPool().open(storetest_postgres_url, min_size=1, max_size=2)
        resets_before = counting.resets
        async with PostgresLogStore(counting) as pooled:
            await pooled.append(session, [msg("b", "a")])
            await pooled.entries(session)
        assert (counting.acquired, counting.released, counting.resets - resets_before) == (2, 2, 2)
        await counting.pool.close()

    run(main)


def test_a_held_connection_lost_or_unsure_is_replaced_by_the_next_call(storetest_postgres_url: str) -> None:
    """The held connection killed by the server between calls: the next call finds it
    closed before sending anything, gives it back to the pool and works on a new one. A
    call whose statement got no answer within the timeout raises ``OutcomeUnknown``, as
    with a pool; its connection (mid-statement, so in no known state) is closed and
    given back, and the next call takes a new one. A call that waits for the handle's
    busy connection past the timeout raises StoreError saying so. (Kills landing
    mid-call: ``test_postgres_log_held_connections_killed_and_stalled`` in
    ``tests/test_faults_postgres.py``.)"""
    from storetest.contract import OutcomeUnknown

    async def main() -> None:
        application = f"storetest_held_{secrets.token_hex(4)}"
        counting = await _CountingPool().open(storetest_postgres_url, min_size=1, max_size=2,
                                              server_settings={"application_name": application})
        admin = await asyncpg.connect(storetest_postgres_url)
        try:
            await admin.execute(SCHEMA)
            session = f"killed-{secrets.token_hex(4)}"
            store = PostgresLogStore(counting, timeout=0.5, hold_connection=True)
            await store.append(session, [msg("a")])
            pids = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = $1", application)
            assert len(pids) == 1
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pids[0]["pid"])
            await asyncio.sleep(0.3)
            await store.append(session, [msg("b", "a")])
            assert (counting.acquired, counting.released) == (2, 1)

            tx = admin.transaction()
            await tx.start()
            await admin.execute("SELECT 1 FROM storetest_log_sessions WHERE session = $1 FOR UPDATE",
                                session.encode())
            with pytest.raises(OutcomeUnknown, match=rf"append to session '{session}' may or may not"):
                await store.append(session, [msg("c", "b")])
            await tx.rollback()
            assert (counting.acquired, counting.released) == (2, 2)
            assert [e.id for e in await store.entries(session)] in (["a", "b"], ["a", "b", "c"])
            assert (counting.acquired, counting.released) == (3, 2)

            async with store._held._the_lock():  # type: ignore[union-attr]  # another call under way
                with pytest.raises(StoreError, match=rf"read of session '{session}' failed: the handle's "
                                   "connection was busy with its other calls"):
                    await store.entries(session)
            await store.aclose()
            await asyncio.wait_for(counting.pool.close(), 10)
        finally:
            await admin.close()

    run(main)


def test_hold_connection_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="hold_connection must be a bool, not int"):
        PostgresLogStore(object(), hold_connection=1)  # type: ignore[arg-type]
