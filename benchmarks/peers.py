"""Our SQLite store against the OpenAI Agents SDK's ``SQLiteSession`` and
``SQLAlchemySession`` (on aiosqlite), side by side in one interleaved run.

    pip install "storetest[bench]"       # openai-agents, sqlalchemy[asyncio], aiosqlite
    python benchmarks/peers.py           # a minute or two; --repeats 15 by default

What is compared, at equal durability (every store in WAL mode; the run is made once
with ``synchronous=FULL`` and once with ``NORMAL``, set on every contender's connections
and read back) and equal threading (every call goes through a worker thread: the peers
run each call in one, so ours is called through ``asyncio.to_thread``):

- save at turn 20 and 2,000, one handle, and two handles alternating on one session
  (each save is a replica's that did not write the last version). Ours saves the whole
  transcript; the peers' ``add_items`` appends the one new message, their cheapest write;
- read of 2,000 messages: ours by a handle of its own (a read always reads the rows,
  and the handle learns their digests), the peers' ``get_items()``; and ``json.loads``
  of those 2,000 messages' JSON (:func:`~storetest.codec.encode_message` text) alone, no
  SQL, the floor for a reader that parses JSON. Ours parses none for a message of one
  piece of text: the SQLite store keeps it as its role and raw text;
- the total of growing a 2,000-turn conversation (a save after every turn), and the
  database file size it leaves (after a WAL checkpoint);
- the floor for saves: each SQLite contender's own statements for one save at turn
  2,000, run alone on a plain ``sqlite3`` connection to its file (same ``synchronous``,
  same worker thread), no Python around them. Ours: ``BEGIN IMMEDIATE``, the version
  ``UPDATE ... RETURNING``, one ``INSERT``, ``COMMIT``; ``SQLiteSession``'s: what its
  ``add_items`` sends (the module's implicit ``BEGIN``, ``INSERT OR IGNORE`` of the
  session, one ``INSERT``, the ``updated_at`` ``UPDATE``, ``COMMIT``).

Then on PostgreSQL (a throwaway server from ``storetest.databases``; skipped, with the
reason, when none can be had): our ``PostgresStore`` against ``SQLAlchemySession`` on
``postgresql+asyncpg``, both on the same database and the event loop (both are async),
with the server's own durability (``synchronous_commit = on``): the same saves and read.
``SQLiteSession`` has no PostgreSQL form.

Then on Redis: our ``RedisStore`` against the SDK's ``RedisSession``
(``agents.extensions.memory``), both on one redis-server started for the run with AOF
on and ``appendfsync always`` (every write fsynced before Redis replies; the settings
are read back with ``CONFIG GET`` and printed), each on a ``redis.asyncio`` client of
its own, on the event loop: the same saves and read. ``--backend`` picks one of the three.

Messages are ~500 characters. Medians over ``--repeats`` rounds; within a round the
contenders take turns in a rotating order, so drift on a shared machine hits all alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from reference_stores.sqlite import SQLiteStore
from storetest.codec import encode_message
from storetest.contract import Message, Role

INSTALL = 'pip install "storetest[bench]"   (openai-agents, sqlalchemy[asyncio], aiosqlite)'
TURNS = 2000
SMALL = 20
SIZE = 500


def texts(n: int) -> list[tuple[Role, str]]:
    filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    body = (filler * (SIZE // len(filler) + 1))[:SIZE]
    roles: tuple[Role, Role] = ("user", "assistant")
    return [(roles[i % 2], f"{i:06d} {body}"[:SIZE]) for i in range(n)]


class _Transcripts:
    """Our side's transcripts: per session, one list growing as an agent's does."""

    def __init__(self, n: int) -> None:
        self.conv = [Message.text(role, text) for role, text in texts(n)]
        self.transcripts: dict[str, list[Message]] = {}

    def _transcript(self, session: str, n: int) -> list[Message]:
        transcript = self.transcripts.setdefault(session, [])
        del transcript[n:]
        transcript.extend(self.conv[len(transcript) : n])
        return transcript


class Ours(_Transcripts):
    name = "storetest SQLiteStore"

    def __init__(self, path: Path, synchronous: str, n: int) -> None:
        super().__init__(n)
        self.path = path
        self.synchronous = synchronous
        self.handles: dict[str, SQLiteStore] = {}

    def _handle(self, which: str) -> SQLiteStore:
        if which not in self.handles:
            # Every read reads the rows (none is served from memory); the reader is a
            # handle like the others and learns what it read.
            self.handles[which] = SQLiteStore(self.path, synchronous=self.synchronous)  # type: ignore[arg-type]
        return self.handles[which]

    async def setup(self, session: str, n: int, *, handles: tuple[str, ...]) -> None:
        await asyncio.to_thread(self._handle(handles[0]).save, session, self._transcript(session, n))
        for other in handles[1:]:  # a replica joins by reading the session first
            await asyncio.to_thread(self._handle(other).messages, session)

    async def turn(self, session: str, n: int, which: str) -> None:
        """The agent's save before request n: the whole transcript of n messages."""
        await asyncio.to_thread(self._handle(which).save, session, self._transcript(session, n))

    async def read(self, session: str) -> int:
        return len(await asyncio.to_thread(self._handle("reader").messages, session))

    async def synchronous_level(self) -> int:
        store = self._handle("a")
        return int(store._conn.execute("PRAGMA synchronous").fetchone()[0])

    async def close(self) -> None:
        for store in self.handles.values():
            store.close()


class _Peer:
    name = ""

    def __init__(self, path: Path, synchronous: str, n: int) -> None:
        self.path = path
        self.synchronous = synchronous
        self.items = [{"role": role, "content": text} for role, text in texts(n)]
        self.handles: dict[tuple[str, str], Any] = {}

    def _make(self, session: str) -> Any:
        raise NotImplementedError

    def _handle(self, session: str, which: str) -> Any:
        if (session, which) not in self.handles:
            self.handles[(session, which)] = self._make(session)
        return self.handles[(session, which)]

    async def setup(self, session: str, n: int, *, handles: tuple[str, ...]) -> None:
        await self._handle(session, handles[0]).add_items(self.items[:n])
        for other in handles[1:]:
            await self._handle(session, other).get_items()

    async def turn(self, session: str, n: int, which: str) -> None:
        """The peer's cheapest write before request n: append message n alone."""
        await self._handle(session, which).add_items([self.items[n - 1]])

    async def read(self, session: str) -> int:
        return len(await self._handle(session, "reader").get_items())

    async def close(self) -> None:
        for handle in self.handles.values():
            close = getattr(handle, "close", None)  # SQLAlchemySession has none: its engine does
            if close is not None:
                close()


class PeerSQLiteSession(_Peer):
    name = "openai-agents SQLiteSession"

    def _make(self, session: str) -> Any:
        from agents import SQLiteSession

        level = self.synchronous

        class Session(SQLiteSession):
            @staticmethod
            def _configure_connection(conn: sqlite3.Connection) -> None:
                SQLiteSession._configure_connection(conn)
                conn.execute(f"PRAGMA synchronous = {level}")

        return Session(session, self.path)

    async def synchronous_level(self) -> int:
        handle = self._handle("probe", "a")

        def probe() -> int:
            return int(handle._get_connection().execute("PRAGMA synchronous").fetchone()[0])

        return await asyncio.to_thread(probe)


class PeerSQLAlchemySession(_Peer):
    name = "openai-agents SQLAlchemySession"

    def __init__(self, path: Path, synchronous: str, n: int) -> None:
        super().__init__(path, synchronous, n)
        from sqlalchemy import event
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        level = synchronous

        @event.listens_for(self.engine.sync_engine, "connect")
        def _durability(dbapi_connection: Any, _: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA synchronous = {level}")
            cursor.close()

    def _make(self, session: str) -> Any:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        return SQLAlchemySession(session, engine=self.engine, create_tables=True)

    async def synchronous_level(self) -> int:
        from sqlalchemy import text

        await self._handle("probe", "a").get_items()  # creates the tables, connects
        async with self.engine.connect() as conn:
            journal = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
            assert journal == "wal", journal
            return int((await conn.execute(text("PRAGMA synchronous"))).scalar() or 0)

    async def close(self) -> None:
        await super().close()
        await self.engine.dispose()


class _SQLAlone:
    """A contender's statements for one save, alone on a plain connection to its file."""

    def __init__(self, path: Path, synchronous: str, session: str) -> None:
        # The peer's connections keep the module's implicit transactions; ours issues
        # BEGIN itself. Each floor copies its contender.
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=self.isolation_level)
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.session = session

    isolation_level: ClassVar[Literal["DEFERRED"] | None] = "DEFERRED"  # the module's implicit BEGIN

    def turn(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.conn.close()


class OursSQLAlone(_SQLAlone):
    isolation_level = None  # BEGIN issued by hand

    def __init__(self, path: Path, synchronous: str, session: str) -> None:
        super().__init__(path, synchronous, session)
        self.key = session.encode("utf-8")
        self.body = encode_message(Message.text("user", texts(1)[0][1]))
        (self.position,) = self.conn.execute(
            "SELECT count(*) FROM storetest_messages m JOIN storetest_sessions s ON s.id = m.session_id "
            "WHERE s.session = ?",
            (self.key,),
        ).fetchone()

    def turn(self) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        sid, _ = conn.execute(
            "UPDATE storetest_sessions SET version = version + 1 WHERE session = ? RETURNING id, version",
            (self.key,),
        ).fetchone()
        conn.executemany(
            "INSERT INTO storetest_messages (session_id, position, digest, body) VALUES (?, ?, ?, ?)",
            [(sid, self.position, os.urandom(32), self.body)],
        )
        conn.execute("COMMIT")
        self.position += 1


class PeerSQLAlone(_SQLAlone):
    def __init__(self, path: Path, synchronous: str, session: str) -> None:
        super().__init__(path, synchronous, session)
        self.data = json.dumps({"role": "user", "content": texts(1)[0][1]})

    def turn(self) -> None:
        conn = self.conn
        conn.execute("INSERT OR IGNORE INTO agent_sessions (session_id) VALUES (?)", (self.session,))
        conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)", [(self.session, self.data)]
        )
        conn.execute(
            "UPDATE agent_sessions SET updated_at = CURRENT_TIMESTAMP WHERE session_id = ?", (self.session,)
        )
        conn.commit()


class OursPostgres(_Transcripts):
    name = "storetest PostgresStore"

    def __init__(self, pool: Any, n: int) -> None:
        super().__init__(n)
        self.pool = pool
        self.handles: dict[str, Any] = {}

    def _handle(self, which: str) -> Any:
        from reference_stores.postgres import PostgresStore

        if which not in self.handles:
            self.handles[which] = PostgresStore(self.pool)
        return self.handles[which]

    async def setup(self, session: str, n: int, *, handles: tuple[str, ...]) -> None:
        await self._handle(handles[0]).save(session, self._transcript(session, n))
        for other in handles[1:]:
            await self._handle(other).messages(session)

    async def turn(self, session: str, n: int, which: str) -> None:
        await self._handle(which).save(session, self._transcript(session, n))

    async def read(self, session: str) -> int:
        return len(await self._handle("reader").messages(session))

    async def close(self) -> None:
        pass  # the pool is closed by its owner


class PeerSQLAlchemyPostgres(_Peer):
    name = "openai-agents SQLAlchemySession"

    def __init__(self, url: str, n: int) -> None:
        super().__init__(Path(), "", n)
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(url.replace("postgresql://", "postgresql+asyncpg://", 1))

    _make = PeerSQLAlchemySession._make

    async def close(self) -> None:
        await self.engine.dispose()


class OursRedis(OursPostgres):
    name = "storetest RedisStore"

    def __init__(self, client: Any, n: int) -> None:
        super().__init__(client, n)

    def _handle(self, which: str) -> Any:
        from reference_stores.redis import RedisStore

        if which not in self.handles:
            self.handles[which] = RedisStore(self.pool, prefix="bench-ours:")
        return self.handles[which]


class PeerRedisSession(_Peer):
    name = "openai-agents RedisSession"

    def __init__(self, client: Any, n: int) -> None:
        super().__init__(Path(), "", n)
        self.client = client

    def _make(self, session: str) -> Any:
        from agents.extensions.memory import RedisSession

        return RedisSession(session, redis_client=self.client, key_prefix="bench-peer")

    async def close(self) -> None:
        pass  # the client is closed by its owner


CONTENDERS = (Ours, PeerSQLiteSession, PeerSQLAlchemySession)
FLOORS = {Ours.name: OursSQLAlone, PeerSQLiteSession.name: PeerSQLAlone}
LEVELS = {"NORMAL": 1, "FULL": 2}


# (session, messages before the first measured save, handles): a replica joins by reading.
_SETUPS: list[tuple[str, int, tuple[str, ...]]] = [
    ("one-20", SMALL - 1, ("a",)),
    ("one-2000", TURNS - 1, ("a",)),
    ("two-20", SMALL - 1, ("a", "b")),
    ("two-2000", TURNS - 1, ("a", "b")),
]
# (label, session, size at the first round, handles taking turns; none for the read)
_MEASURES: list[tuple[str, str, int, str]] = [
    ("save@20 one", "one-20", SMALL, "a"),
    ("save@2000 one", "one-2000", TURNS, "a"),
    ("save@20 two", "two-20", SMALL, "ab"),
    ("save@2000 two", "two-2000", TURNS, "ab"),
    ("read 2000", "one-2000", TURNS, ""),
]


async def _round(stores: list[Any], r: int, results: dict[str, dict[str, list[float]]]) -> None:
    """Round ``r``: measure by measure, the contenders taking turns in a rotating order."""
    order = stores[r % len(stores) :] + stores[: r % len(stores)]
    for label, session, size, handles in _MEASURES:
        for store in order:
            call = store.turn(session, size + r, handles[r % len(handles)]) if handles else store.read(session)
            start = time.perf_counter()
            await call
            results[store.name].setdefault(label, []).append((time.perf_counter() - start) * 1000)


async def run_level(base: Path, synchronous: str, repeats: int) -> dict[str, Any]:
    n = TURNS + repeats + 2
    stores = [make(base / f"{make.__name__}-{synchronous}.sqlite", synchronous, n) for make in CONTENDERS]
    results: dict[str, dict[str, list[float]]] = {s.name: {} for s in stores}
    floors: dict[str, _SQLAlone] = {}
    try:
        for store in stores:
            level = await store.synchronous_level()
            if level != LEVELS[synchronous]:
                raise SystemExit(f"{store.name}: synchronous is {level}, not {synchronous}")
            for session, size, handles in _SETUPS:
                await store.setup(session, size, handles=handles)
            if store.name in FLOORS:
                await store.setup("sql-2000", TURNS - 1, handles=("a",))
                floors[store.name] = FLOORS[store.name](store.path, synchronous, "sql-2000")
        # The floor parses the JSON of the 2,000 messages read: the codec's text for them,
        # as a store keeping every message as JSON would hold it.
        bodies = [encode_message(Message.text(role, text)) for role, text in texts(TURNS)]
        for r in range(repeats):
            await _round(stores, r, results)
            for name, floor in list(floors.items())[r % 2 :] + list(floors.items())[: r % 2]:
                start = time.perf_counter()
                await asyncio.to_thread(floor.turn)
                results[name].setdefault("SQL alone @2000", []).append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            for body in bodies[:TURNS]:
                json.loads(body)
            results.setdefault("json.loads floor", {}).setdefault("read 2000", []).append(
                (time.perf_counter() - start) * 1000
            )
    finally:
        for store in stores:
            await store.close()
        for floor in floors.values():
            floor.close()
    medians = {name: {k: statistics.median(v) for k, v in got.items()} for name, got in results.items()}

    # A whole conversation, grown as an agent grows it, each contender in a file of its own.
    totals: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for make in CONTENDERS:
        path = base / f"{make.__name__}-{synchronous}-conversation.sqlite"
        store = make(path, synchronous, TURNS)
        try:
            start = time.perf_counter()
            for turn in range(1, TURNS + 1):
                await store.turn("conversation", turn, "a")
            totals[store.name] = (time.perf_counter() - start) * 1000
        finally:
            await store.close()
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sizes[store.name] = os.path.getsize(path)
    return {"medians": medians, "totals": totals, "sizes": sizes}


async def run_postgres(url: str, repeats: int) -> dict[str, dict[str, float]]:
    import asyncpg

    from reference_stores.postgres import SCHEMA

    n = TURNS + repeats + 2
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    try:
        async with pool.acquire() as conn:
            await conn.execute(SCHEMA)
        return await _pair([OursPostgres(pool, n), PeerSQLAlchemyPostgres(url, n)], repeats)
    finally:
        await pool.close()


async def _pair(stores: list[Any], repeats: int) -> dict[str, dict[str, float]]:
    """Set up both contenders, run the interleaved rounds, close them: the medians."""
    try:
        for store in stores:
            for session, size, handles in _SETUPS:
                await store.setup(session, size, handles=handles)
        results: dict[str, dict[str, list[float]]] = {s.name: {} for s in stores}
        for r in range(repeats):
            await _round(stores, r, results)
    finally:
        for store in stores:
            await store.close()
    return {name: {k: statistics.median(v) for k, v in got.items()} for name, got in results.items()}


#: What the Redis run asks of its server, read back before measuring.
REDIS_DURABILITY = {"appendonly": "yes", "appendfsync": "always"}


async def run_redis(url: str, repeats: int) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    from redis.asyncio import Redis

    n = TURNS + repeats + 2
    # Equal clients; socket timeouts set, as the store asks.
    ours, theirs = (Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10) for _ in range(2))
    try:
        settings = {k: _text((await ours.config_get(k))[k]) for k in REDIS_DURABILITY}
        if settings != REDIS_DURABILITY:
            raise SystemExit(f"the Redis server runs with {settings}, not {REDIS_DURABILITY}")
        return settings, await _pair([OursRedis(ours, n), PeerRedisSession(theirs, n)], repeats)
    finally:
        await ours.aclose()
        await theirs.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def report_postgres(med: dict[str, dict[str, float]], repeats: int) -> str:
    return _report_pair("PostgreSQL, both on the event loop", OursPostgres.name, PeerSQLAlchemyPostgres.name,
                        "SQLAlchemySession", med, repeats)


def _report_pair(title: str, ours: str, peer: str, short: str, med: dict[str, dict[str, float]], repeats: int) -> str:
    lines = [
        f"### {title} (medians of {repeats}, ms)",
        "",
        f"| measure | {ours} | {peer} | ours / {short} |",
        "|---|---|---|---|",
    ]
    for key in ("save@20 one", "save@2000 one", "save@20 two", "save@2000 two", "read 2000"):
        a, c = med[ours][key], med[peer][key]
        lines.append(f"| {key} | {a:.3f} | {c:.3f} | {a / c:.2f}x |")
    growth_one = med[ours]["save@2000 one"] / med[ours]["save@20 one"]
    growth_two = med[ours]["save@2000 two"] / med[ours]["save@20 two"]
    lines += ["", f"ours: save@2000 / save@20 = {growth_one:.2f}x (one handle), {growth_two:.2f}x (two alternating)"]
    return "\n".join(lines)


def report(synchronous: str, result: dict[str, Any], repeats: int) -> str:
    med, totals, sizes = result["medians"], result["totals"], result["sizes"]
    ours, peer, alchemy = (c.name for c in CONTENDERS)
    lines = [
        f"### synchronous={synchronous}, WAL, every call through a worker thread "
        f"(medians of {repeats}, ms)",
        "",
        f"| measure | {ours} | {peer} | {alchemy} | ours / SQLiteSession | ours / SQLAlchemySession |",
        "|---|---|---|---|---|---|",
    ]
    for key in ("save@20 one", "save@2000 one", "save@20 two", "save@2000 two", "read 2000"):
        a, b, c = med[ours][key], med[peer][key], med[alchemy][key]
        lines.append(f"| {key} | {a:.3f} | {b:.3f} | {c:.3f} | {a / b:.2f}x | {a / c:.2f}x |")
    floor = med["json.loads floor"]["read 2000"]
    lines.append(f"| json.loads of the 2,000 messages' JSON (floor) | {floor:.3f} | | | | |")
    a, b = med[ours]["SQL alone @2000"], med[peer]["SQL alone @2000"]
    lines.append(f"| a save's SQL alone @2000 (floor) | {a:.3f} | {b:.3f} | | {a / b:.2f}x | |")
    a, b, c = (totals[x] for x in (ours, peer, alchemy))
    lines.append(
        f"| 2,000-turn conversation, total | {a:.0f} | {b:.0f} | {c:.0f} | {a / b:.2f}x | {a / c:.2f}x |"
    )
    a, b, c = (sizes[x] / 1e6 for x in (ours, peer, alchemy))
    lines.append(f"| file size (MB) | {a:.2f} | {b:.2f} | {c:.2f} | {a / b:.2f}x | {a / c:.2f}x |")
    growth_one = med[ours]["save@2000 one"] / med[ours]["save@20 one"]
    growth_two = med[ours]["save@2000 two"] / med[ours]["save@20 two"]
    lines += [
        "",
        f"ours: save@2000 / save@20 = {growth_one:.2f}x (one handle), {growth_two:.2f}x (two alternating); "
        f"read 2000 / json.loads floor = {med[ours]['read 2000'] / floor:.2f}x",
        f"save@2000 over its SQL alone: ours {med[ours]['save@2000 one'] / med[ours]['SQL alone @2000']:.2f}x, "
        f"SQLiteSession {med[peer]['save@2000 one'] / med[peer]['SQL alone @2000']:.2f}x; "
        f"ours' SQL alone / SQLiteSession's add_items = "
        f"{med[ours]['SQL alone @2000'] / med[peer]['save@2000 one']:.2f}x",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--synchronous", action="append", choices=sorted(LEVELS), help="SQLite; default: both")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "redis"], help="default: all three")
    args = parser.parse_args(argv)
    try:
        import aiosqlite  # noqa: F401
        import sqlalchemy.ext.asyncio  # noqa: F401
        from agents import SQLiteSession  # noqa: F401
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession  # noqa: F401
    except ImportError as exc:
        print(f"benchmarks/peers.py needs the peers it compares against: {exc}.")
        print(f"Install them with: {INSTALL}")
        return 2
    if args.backend in (None, "sqlite"):
        with tempfile.TemporaryDirectory(prefix="storetest-peers-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
            for synchronous in args.synchronous or ["FULL", "NORMAL"]:
                result = asyncio.run(run_level(Path(tmp), synchronous, args.repeats))
                print(report(synchronous, result, args.repeats))
                print()
    if args.backend in (None, "postgres"):
        from storetest import databases

        try:
            with databases.throwaway("postgres") as url:
                print(report_postgres(asyncio.run(run_postgres(url, args.repeats)), args.repeats))
        except (databases.Unavailable, ImportError) as exc:
            print(f"### PostgreSQL: skipped ({exc})")
    if args.backend in (None, "redis"):
        from storetest import databases

        print()
        try:
            print(_redis_part(args.repeats))
        except (databases.Unavailable, ImportError) as exc:
            print(f"### Redis: skipped ({exc})")
    return 0


def _redis_part(repeats: int) -> str:
    """Both contenders on one redis-server of the run's own, AOF fsynced on every write."""
    from storetest._databases import redis as redis_databases

    with tempfile.TemporaryDirectory(prefix="storetest-peers-redis-") as tmp:
        server = redis_databases.start_server(Path(tmp), config=REDIS_DURABILITY)
        try:
            settings, med = asyncio.run(run_redis(server.url, repeats))
        finally:
            os.kill(server.pid, signal.SIGTERM)
            os.waitpid(server.pid, 0)
    shown = ", ".join(f"{k} {v}" for k, v in settings.items())
    return _report_pair(f"Redis 7, one server, {shown} (read back), both on the event loop",
                        OursRedis.name, PeerRedisSession.name, "RedisSession", med, repeats)


if __name__ == "__main__":
    sys.exit(main())
