"""What the PostgreSQL store and its provisioning promise beyond the shared suite:
idempotent DDL, least privilege, errors that name the session, NUL round trips,
incremental saves, lost connections, and where throwaway databases come from."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest

from storetest._engine import servers
from storetest._engine.servers import postgres as provisioning
from storetest.contract import Message, OutcomeUnknown, StoreError, Text, ToolCall
from tests.faults.proxy import POSTGRES_COMMIT, CuttingProxy
from tests.wire import RoundTrips

asyncpg = pytest.importorskip("asyncpg")

from reference_stores.postgres import SCHEMA, PostgresStore  # noqa: E402

pytest_plugins = ["pytester"]

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(main())  # type: ignore[arg-type]


async def _pool(url: str) -> Any:
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    async with pool.acquire() as conn:
        await conn.execute(SCHEMA)
    return pool


def _as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{user}:pw@{host}", parts.path, parts.query, ""))


def _session() -> str:
    return f"s-{secrets.token_hex(4)}"


def test_schema_applies_twice(storetest_postgres_url: str) -> None:
    """SCHEMA is safe to run on every deploy: the second run changes nothing."""

    async def main() -> list[str]:
        conn = await asyncpg.connect(storetest_postgres_url)
        try:
            await conn.execute(SCHEMA)
            await conn.execute(SCHEMA)
            rows = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'storetest_%' "
                "ORDER BY tablename"
            )
            return [r["tablename"] for r in rows]
        finally:
            await conn.close()

    # Other stores' tests (the log store) may share this database: look at ours only.
    ours = [t for t in run(main) if not t.startswith("storetest_log")]
    assert ours == ["storetest_messages", "storetest_sessions", "storetest_steers"]


def test_a_role_with_only_dml_rights_can_use_the_store(storetest_postgres_url: str) -> None:
    """The store runs no DDL and no temp tables: SELECT/INSERT/UPDATE/DELETE suffice."""
    role = f"storetest_app_{secrets.token_hex(4)}"
    session = _session()

    async def main() -> tuple[list[Message], list[str]]:
        admin = await asyncpg.connect(storetest_postgres_url)
        try:
            await admin.execute(SCHEMA)
            database = await admin.fetchval("SELECT current_database()")
            try:
                await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
            except asyncpg.InsufficientPrivilegeError:
                pytest.skip("the test database's user may not create roles")
            await admin.execute(f'GRANT CONNECT ON DATABASE "{database}" TO {role}')
            # Temp tables are granted to PUBLIC by default; take that away too.
            await admin.execute(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
            await admin.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
            await admin.execute(f"REVOKE CREATE ON SCHEMA public FROM {role}, PUBLIC")
            await admin.execute(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON storetest_sessions, "
                f"storetest_messages, storetest_steers TO {role}"
            )
            # No grant on storetest_steers_id_seq: an identity column needs none.
            app = await asyncpg.create_pool(
                _as_user(storetest_postgres_url, role), min_size=1, max_size=2
            )
            try:
                async with app.acquire() as conn:
                    # The role really is limited, or this test proves nothing.
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.execute("CREATE TABLE storetest_forbidden (x int)")
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.execute("CREATE TEMP TABLE storetest_forbidden (x int)")
                store = PostgresStore(app)
                await store.save(session, [Message.text("user", "one")])
                await store.save(
                    session, [Message.text("user", "one"), Message.text("assistant", "two")]
                )
                await store.add_steer(session, "left")
                await store.add_steer(session, "right")
                return await store.messages(session), await store.take_steers(session)
            finally:
                await app.close()
        finally:
            await admin.execute(f"DROP OWNED BY {role}")
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
            await admin.close()

    transcript, steers = run(main)
    assert transcript == [Message.text("user", "one"), Message.text("assistant", "two")]
    assert steers == ["left", "right"]


def test_nul_in_session_ids_and_steers_round_trips(storetest_postgres_url: str) -> None:
    """Postgres text refuses NUL; ids and steers holding one still come back exact."""
    odd = f"a\x00b-{secrets.token_hex(3)}"
    lookalike = odd.replace("\x00", "")

    async def main() -> tuple[list[str], list[str], list[Message], list[Message]]:
        pool = await _pool(storetest_postgres_url)
        try:
            store = PostgresStore(pool)
            await store.add_steer(odd, "x\x00y")
            await store.add_steer(odd, "\x00")
            await store.add_steer(lookalike, "other")
            await store.save(odd, [Message.text("user", "nul \x00 inside")])
            return (
                await store.take_steers(odd),
                await store.take_steers(lookalike),
                await PostgresStore(pool).messages(odd),
                await store.messages(lookalike),
            )
        finally:
            await pool.close()

    steers, other, transcript, empty = run(main)
    assert steers == ["x\x00y", "\x00"]
    assert other == ["other"]
    assert transcript == [Message.text("user", "nul \x00 inside")]
    assert empty == []


def test_session_ids_compare_byte_for_byte(storetest_postgres_url: str) -> None:
    """No collation folding: case, trailing space and normalization all differ."""
    base = secrets.token_hex(3)
    ids = [f"a{base}", f"A{base}", f"a{base} ", f"\u00e9{base}", f"e\u0301{base}"]

    async def main() -> list[list[Message]]:
        pool = await _pool(storetest_postgres_url)
        try:
            store = PostgresStore(pool)
            for i, session in enumerate(ids):
                await store.save(session, [Message.text("user", str(i))])
            fresh = PostgresStore(pool)
            return [await fresh.messages(s) for s in ids]
        finally:
            await pool.close()

    assert run(main) == [[Message.text("user", str(i))] for i in range(len(ids))]


def test_errors_name_the_operation_and_the_session(storetest_postgres_url: str) -> None:
    """A closed pool gives StoreError naming what failed, raised from asyncpg's error."""
    session = "the-session"

    async def main() -> list[StoreError]:
        pool = await _pool(storetest_postgres_url)
        await pool.close()
        store = PostgresStore(pool)
        errors: list[StoreError] = []
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: store.save(session, [Message.text("user", "hi")]),
            lambda: store.messages(session),
            lambda: store.add_steer(session, "go"),
            lambda: store.take_steers(session),
        ]
        for call in calls:
            with pytest.raises(StoreError) as info:
                await call()
            errors.append(info.value)
        return errors

    errors = run(main)
    operations = ["save to", "read of", "add_steer to", "take_steers from"]
    for error, operation in zip(errors, operations, strict=True):
        assert str(error).startswith(operation), str(error)
        assert "session 'the-session' failed: the pool is closed" in str(error)
        assert isinstance(error.__cause__, asyncpg.InterfaceError)


def test_bad_arguments_are_refused_before_the_database(storetest_postgres_url: str) -> None:
    """Validation comes first: with a closed pool, bad input still raises TypeError or
    ValueError, never StoreError."""

    async def main() -> None:
        pool = await _pool(storetest_postgres_url)
        await pool.close()
        store = PostgresStore(pool)
        with pytest.raises(ValueError):
            await store.save("", [])
        with pytest.raises(TypeError):
            await store.save("s", ["not a message"])  # type: ignore[list-item]
        with pytest.raises(ValueError):
            await store.messages("x" * 513)
        with pytest.raises(ValueError):
            await store.add_steer("s", "\ud800")
        with pytest.raises(TypeError):
            await store.take_steers(b"s")  # type: ignore[arg-type]

    run(main)


async def _row_versions(pool: Any, session: str) -> list[tuple[int, str]]:
    rows = await pool.fetch(
        "SELECT position, xmin::text AS x FROM storetest_messages WHERE session = $1 "
        "ORDER BY position",
        session.encode(),
    )
    return [(r["position"], r["x"]) for r in rows]


def _conversation(n: int) -> list[Message]:
    return [
        Message("assistant", (Text(f"turn {i}"), ToolCall(f"c{i}", "f", '{"z":1, "z":2}')))
        for i in range(n)
    ]


def test_saves_rewrite_only_what_changed(storetest_postgres_url: str) -> None:
    """A growing transcript's unchanged rows are left alone (their xmin stays), by the
    handle that wrote them and by a replica that must compare stored digests."""
    session = _session()
    msgs = _conversation(8)

    async def main() -> None:
        pool = await _pool(storetest_postgres_url)
        try:
            store = PostgresStore(pool)
            await store.save(session, msgs[:5])
            before = await _row_versions(pool, session)
            await store.save(session, msgs[:6])
            after = await _row_versions(pool, session)
            assert after[:5] == before, "the handle's own save rewrote unchanged rows"
            assert len(after) == 6

            replica = PostgresStore(pool)  # remembers nothing: compares digests
            await replica.save(session, msgs[:7])
            again = await _row_versions(pool, session)
            assert again[:6] == after, "a replica's save rewrote unchanged rows"

            changed = [*msgs[:2], Message.text("user", "edited"), *msgs[3:7]]
            await store.save(session, changed)  # its memory is stale: replica wrote
            edited = await _row_versions(pool, session)
            assert edited[:2] == again[:2]
            assert [x for _, x in edited[2:]] != [x for _, x in again[2:]]
            assert await PostgresStore(pool).messages(session) == changed
            await store.save(session, changed[:3])
            assert await replica.messages(session) == changed[:3]
        finally:
            await pool.close()

    run(main)


def test_a_stale_handle_never_trusts_its_memory(storetest_postgres_url: str) -> None:
    """After another replica wrote, a handle's remembered prefix is wrong; the version
    check must send it back to the stored digests."""
    session = _session()
    a, b, c = (Message.text("user", x) for x in "abc")

    async def main() -> list[Message]:
        pool_1 = await _pool(storetest_postgres_url)
        pool_2 = await _pool(storetest_postgres_url)
        try:
            one, two = PostgresStore(pool_1), PostgresStore(pool_2)
            await one.save(session, [a, b])
            await two.save(session, [a, c, c])
            await one.save(session, [a, b, c])
            return await two.messages(session)
        finally:
            await pool_1.close()
            await pool_2.close()

    assert run(main) == [a, b, c]


def test_concurrent_takers_on_two_pools_get_each_steer_once_in_order(
    storetest_postgres_url: str,
) -> None:
    session = _session()
    count = 150

    async def main() -> list[list[str]]:
        pools = [await _pool(storetest_postgres_url) for _ in range(2)]
        try:
            stores = [PostgresStore(p) for p in pools]
            takes: list[list[str]] = []
            done = asyncio.Event()

            async def adder() -> None:
                for i in range(count):
                    await stores[i % 2].add_steer(session, f"{i:04d}")
                done.set()

            async def taker(store: PostgresStore) -> None:
                while True:
                    finished = done.is_set()
                    got = await store.take_steers(session)
                    if got:
                        takes.append(got)
                    if finished and not got:
                        return

            await asyncio.gather(adder(), *(taker(s) for s in stores for _ in range(3)))
            return takes
        finally:
            for p in pools:
                await p.close()

    takes = run(main)
    flat = [s for take in takes for s in take]
    assert sorted(flat) == [f"{i:04d}" for i in range(count)], "lost or duplicated steers"
    for take in takes:
        assert take == sorted(take), f"a take came out of order: {take}"


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_a_take_waits_for_an_add_under_way(storetest_postgres_url: str, isolation: str) -> None:
    """An older add under way (its steer inserted, its share lock on the session row
    held, not committed) and a newer add committed: the take must wait for the older
    one and take both, oldest first. A take that read the queue before its lock was
    granted (a lock and a DELETE in one statement share one snapshot, as does every
    statement of a REPEATABLE READ transaction) would take the newer steer alone and
    leave the older for the next take. The server's default isolation must not matter."""
    session = _session()
    key = session.encode()
    name = f"storetest_take_{secrets.token_hex(4)}"

    async def main() -> tuple[list[str], list[str]]:
        pool = await _pool(storetest_postgres_url)
        takers = await asyncpg.create_pool(
            storetest_postgres_url,
            min_size=1,
            max_size=1,
            server_settings={"application_name": name, "default_transaction_isolation": isolation},
        )
        older = await asyncpg.connect(storetest_postgres_url)
        try:
            store = PostgresStore(pool)
            await store.add_steer(session, "before")
            assert await store.take_steers(session) == ["before"]
            # An add as the store makes one, stopped before its COMMIT.
            add = older.transaction()
            await add.start()
            await older.execute("SELECT 1 FROM storetest_sessions WHERE session = $1 FOR KEY SHARE", key)
            await older.execute("INSERT INTO storetest_steers (session, text) VALUES ($1, $2)", key, b"older")
            await store.add_steer(session, "newer")
            take = asyncio.ensure_future(PostgresStore(takers).take_steers(session))
            for _ in range(3000):  # gives up after about 30 s: a hang, not a timing assertion
                if take.done() or await pool.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                    name,
                ):
                    break
                await asyncio.sleep(0.01)
            await add.commit()
            return await take, await store.take_steers(session)
        finally:
            await older.close()
            await takers.close()
            await pool.close()

    assert run(main) == (["older", "newer"], [])


def test_an_application_transaction_on_the_connection_is_refused_not_committed(
    storetest_postgres_url: str,
) -> None:
    """A "pool" handing the store a connection inside the application's transaction:
    the store refuses before sending anything, rather than let its COMMIT commit the
    application's work."""
    session = _session()

    async def main() -> tuple[str, int, bool]:
        conn = await asyncpg.connect(storetest_postgres_url)
        try:
            await conn.execute("CREATE TEMP TABLE app_work (x int)")
            app = conn.transaction()
            await app.start()
            await conn.execute("INSERT INTO app_work VALUES (1)")
            store = PostgresStore(_OneConnection(conn))
            with pytest.raises(StoreError) as info:
                await store.add_steer(session, "x")
            await app.rollback()
            return str(info.value), await conn.fetchval("SELECT count(*) FROM app_work"), conn.is_in_transaction()
        finally:
            await conn.close()

    message, rows, still_open = run(main)
    assert message.startswith(f"add_steer to session {session!r} failed: the connection is inside a transaction")
    assert rows == 0 and not still_open


# Round trips ------------------------------------------------------------------------


class _OneConnection:
    """A pool of one connection, given back as it is: asyncpg's pool sends a reset query
    on every release, which is the pool's round trip, not the store's."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def acquire(self, timeout: float | None = None) -> _OneConnection:
        return self

    async def __aenter__(self) -> Any:
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        return None


def test_round_trips_of_takes_and_adds(storetest_postgres_url: str) -> None:
    """Issue 11: round trips counted on the wire, once every statement has been used on
    the connection (asyncpg prepares a statement on its first use there, one more round
    trip). An empty take is its probe; a take that finds steers adds BEGIN with the row
    lock in one message, the DELETE ... RETURNING and COMMIT; an add is BEGIN with its
    two row statements, the INSERT and COMMIT."""
    session = _session()
    parts = urlsplit(storetest_postgres_url)
    wire = RoundTrips(parts.hostname or "127.0.0.1", parts.port or 5432, "postgres")

    async def main() -> dict[str, int]:
        pool = await _pool(storetest_postgres_url)  # applies SCHEMA
        conn = await asyncpg.connect(_proxied(storetest_postgres_url, wire.port), ssl=False)
        counts: dict[str, int] = {}

        async def count(name: str, call: Awaitable[T]) -> T:
            before = wire.count
            result = await call
            counts[name] = wire.count - before
            return result

        try:
            store = PostgresStore(_OneConnection(conn))
            await store.add_steer(session, "warm")
            assert await store.take_steers(session) == ["warm"]
            assert await count("empty take", store.take_steers(session)) == []
            await count("add", store.add_steer(session, "one"))
            for i in range(2, 1001):
                await store.add_steer(session, f"{i}")
            taken = await count("take of 1,000", store.take_steers(session))
            assert taken == ["one", *(f"{i}" for i in range(2, 1001))]
            return counts
        finally:
            await conn.close()
            await pool.close()
            wire.close()

    assert run(main) == {"empty take": 1, "add": 3, "take of 1,000": 4}


# Lost connections ------------------------------------------------------------------


class _ReleaseFails:
    """A real pool whose release raises after giving the connection back, as asyncpg's
    did when a terminated backend left the protocol mid-operation."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def acquire(self, timeout: float | None = None) -> _ReleaseFails._Acquire:
        return _ReleaseFails._Acquire(self.pool)

    class _Acquire:
        def __init__(self, pool: Any) -> None:
            self.pool = pool

        async def __aenter__(self) -> Any:
            self.conn = await self.pool.acquire()
            return self.conn

        async def __aexit__(self, *exc: object) -> None:
            await self.pool.release(self.conn)
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 15; another operation (2) is in progress"
            )


def test_a_commit_that_landed_is_a_success_though_the_release_fails(
    storetest_postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 10, items 1 and 2: a take whose release raised lost the steers it had
    deleted, and asyncpg's raw InternalClientError escaped. Issue 32: the warning then
    logged read like a failure, with a traceback; it says what happened instead."""
    session = _session()
    caplog.set_level(logging.WARNING, logger="reference_stores.postgres")

    async def main() -> tuple[list[str], list[str], list[Message]]:
        pool = await _pool(storetest_postgres_url)
        try:
            store = PostgresStore(_ReleaseFails(pool))
            await store.add_steer(session, "one")
            await store.add_steer(session, "two")
            await store.save(session, [Message.text("user", "kept")])
            taken = await store.take_steers(session)
            return taken, await PostgresStore(pool).take_steers(session), await store.messages(session)
        finally:
            await pool.close()

    taken, left, transcript = run(main)
    assert taken == ["one", "two"]
    assert left == []
    assert transcript == [Message.text("user", "kept")]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 5  # two adds, a save, a take, a read
    assert warned[0].getMessage() == (
        f"add_steer to session {session!r} succeeded, and anything it wrote is committed; "
        "giving its connection back to the pool then failed (the connection to PostgreSQL broke "
        "mid-protocol (cannot switch to state 15; another operation (2) is in progress)), "
        "so the pool closes that connection and opens a new one when it next needs one"
    )
    assert all(r.exc_info is None for r in warned)  # no traceback that reads like a failure


def _proxied(url: str, port: int) -> str:
    parts = urlsplit(url)
    userinfo = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit((parts.scheme, f"{userinfo}127.0.0.1:{port}", parts.path, parts.query, ""))


@pytest.mark.parametrize("operation", ["save", "add_steer", "take_steers"])
def test_a_connection_lost_after_commit_raises_outcome_unknown(
    storetest_postgres_url: str, operation: str
) -> None:
    """Issue 10, item 3: a COMMIT that reached the server, whose answer never came
    back, was reported as a failure that changed nothing; here it lands, and the
    store must say the outcome is unknown (a take: with the steers it read)."""
    session = _session()
    parts = urlsplit(storetest_postgres_url)
    proxy = CuttingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)

    async def main() -> tuple[OutcomeUnknown, list[Message], list[str]]:
        pool = await _pool(storetest_postgres_url)
        cut_pool = await asyncpg.create_pool(
            _proxied(storetest_postgres_url, proxy.port), min_size=1, max_size=1
        )
        try:
            direct, cut = PostgresStore(pool), PostgresStore(cut_pool)
            await direct.save(session, [Message.text("user", "old")])
            await direct.add_steer(session, "queued")
            proxy.cut_after_commit(POSTGRES_COMMIT)
            with pytest.raises(OutcomeUnknown) as info:
                if operation == "save":
                    await cut.save(session, [Message.text("user", "new")])
                elif operation == "add_steer":
                    await cut.add_steer(session, "added")
                else:
                    await cut.take_steers(session)
            assert proxy.cut.is_set(), "the proxy never saw the COMMIT"
            # The pool replaces the lost connection: the handle keeps working.
            transcript = await cut.messages(session)
            return info.value, transcript, await direct.take_steers(session)
        finally:
            await cut_pool.close()
            await pool.close()
            proxy.close()

    error, transcript, left = run(main)
    message = str(error)
    assert message.startswith(f"{'take_steers from' if operation == 'take_steers' else operation + ' to'} "
                              f"session {session!r} may or may not have taken effect: "), message
    assert "after COMMIT was sent" in message
    # The COMMIT landed: the save replaced, the add queued, the take removed.
    if operation == "save":
        assert transcript == [Message.text("user", "new")]
    else:
        assert transcript == [Message.text("user", "old")]
    assert left == {"save": ["queued"], "add_steer": ["queued", "added"], "take_steers": []}[operation]
    assert error.steers == (["queued"] if operation == "take_steers" else [])


async def _terminate_when_waiting(admin: Any) -> int:
    """Terminate the backend that waits on a lock held by ``admin``; its pid."""
    for _ in range(3000):  # gives up after about 30 s: a hang, not a timing assertion
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid() LIMIT 1"
        )
        if pid is not None:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError("the store never waited on the lock the test holds")


@pytest.mark.parametrize("operation", ["save", "add_steer", "take_steers"])
def test_a_backend_terminated_mid_transaction_names_the_cause_and_changes_nothing(
    storetest_postgres_url: str, operation: str
) -> None:
    """Issue 10, item 4 (and the other half of item 3): terminated while it waits on a
    lock the test holds, an operation fails with the server's reason in its own text,
    not "cannot call Transaction.__aexit__()", and leaves everything as it was."""
    session = _session()
    key = session.encode()

    async def main() -> tuple[StoreError, list[Message], list[str], list[str]]:
        pool = await _pool(storetest_postgres_url)
        admin = await asyncpg.connect(storetest_postgres_url)
        try:
            store = PostgresStore(pool)
            await store.save(session, [Message.text("user", "old")])
            await store.add_steer(session, "queued")
            lock = admin.transaction()
            await lock.start()
            await admin.execute(
                "SELECT 1 FROM storetest_sessions WHERE session = $1 FOR UPDATE", key
            )
            if operation == "save":
                call = store.save(session, [Message.text("user", "new")])
            elif operation == "add_steer":
                call = store.add_steer(session, "added")
            else:
                call = store.take_steers(session)
            task = asyncio.ensure_future(call)
            await _terminate_when_waiting(admin)
            with pytest.raises(StoreError) as info:
                await task
            await lock.rollback()
            # Still usable: the pool replaced the terminated connection.
            await store.add_steer(session, "after")
            return (
                info.value,
                await PostgresStore(pool).messages(session),
                await store.take_steers(session),
                await store.take_steers(session),
            )
        finally:
            await admin.close()
            await pool.close()

    error, transcript, steers, empty = run(main)
    assert type(error) is StoreError
    operation_text = "take_steers from" if operation == "take_steers" else f"{operation} to"
    assert str(error).startswith(f"{operation_text} session {session!r} failed: "), str(error)
    assert "terminating connection due to administrator command" in str(error)
    # The error that broke the transaction, not a failed rollback's.
    assert "__aexit__" not in str(error)
    assert isinstance(error.__cause__, asyncpg.PostgresError)
    assert transcript == [Message.text("user", "old")]
    assert steers == ["queued", "after"]
    assert empty == []


# Provisioning ----------------------------------------------------------------------


def _database_exists(admin_url: str, name: str) -> bool:
    async def main() -> bool:
        conn = await asyncpg.connect(admin_url)
        try:
            return bool(await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name))
        finally:
            await conn.close()

    return run(main)


def test_an_env_url_gets_a_fresh_database_dropped_afterwards(
    storetest_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STORETEST_POSTGRES_URL wins over everything else; the database made in that
    server is ours alone and gone once the generator finishes."""
    monkeypatch.setenv("STORETEST_POSTGRES_URL", storetest_postgres_url)
    monkeypatch.setattr(provisioning, "docker_engine_answers", _must_not_be_called)
    monkeypatch.setattr(provisioning, "find_bindir", _must_not_be_called)
    run_dirs = servers.TestRun(tmp_path / "private", tmp_path / "shared")
    gen = provisioning.provision(run_dirs)
    url = next(gen)
    name = urlsplit(url).path.lstrip("/")
    assert name.startswith("storetest_")
    assert url != storetest_postgres_url
    assert _database_exists(storetest_postgres_url, name)
    next(gen, None)
    assert not _database_exists(storetest_postgres_url, name)


def _must_not_be_called(*args: object) -> Any:
    raise AssertionError("provision looked past STORETEST_POSTGRES_URL")


@pytest.fixture
def nothing_available(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("STORETEST_POSTGRES_URL", raising=False)
    monkeypatch.setattr(provisioning, "docker_engine_answers", lambda: False)
    monkeypatch.setattr(provisioning, "find_bindir", lambda: None)
    yield


@pytest.mark.usefixtures("nothing_available")
def test_with_nothing_available_the_message_names_the_three_ways(tmp_path: Path) -> None:
    run_dirs = servers.TestRun(tmp_path / "private", tmp_path / "shared")
    with pytest.raises(servers.Unavailable) as info:
        next(provisioning.provision(run_dirs))
    message = str(info.value)
    assert "STORETEST_POSTGRES_URL" in message
    assert "Docker" in message
    assert "PostgreSQL server binaries" in message


_INNER_CONFTEST = """
import storetest._engine.servers.postgres as provisioning

provisioning.docker_engine_answers = lambda: False
provisioning.find_bindir = lambda: None
"""

_INNER_TEST = """
def test_needs_postgres(storetest_postgres_url):
    assert storetest_postgres_url
"""


@pytest.mark.parametrize("require", [None, "postgres", "mysql,postgres", "all"])
def test_store_require_turns_the_skip_into_a_failure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require: str | None
) -> None:
    monkeypatch.delenv("STORETEST_POSTGRES_URL", raising=False)
    if require is None:
        monkeypatch.delenv("STORETEST_REQUIRE", raising=False)
    else:
        monkeypatch.setenv("STORETEST_REQUIRE", require)
    pytester.makeconftest(_INNER_CONFTEST)
    pytester.makepyfile(_INNER_TEST)
    result = pytester.runpytest_subprocess("-rsE", "-p", "no:cacheprovider")
    if require is None:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*no postgres database*STORETEST_POSTGRES_URL*Docker*"])
    else:
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(["*postgres is required (STORETEST_REQUIRE) but unavailable*"])
