"""Our stores against the OpenAI Agents SDK's ``SQLiteSession`` and ``SQLAlchemySession``,
side by side in one interleaved run, at one stated durability.

    pip install "storetest[bench]"       # openai-agents, sqlalchemy[asyncio], aiosqlite
    python benchmarks/peers.py           # a few minutes; every section
    python benchmarks/peers.py --section sqlite --synchronous FULL --floor-rounds 800
    python benchmarks/peers.py --reads --section sqlite --section redis   # the read rows alone

Every figure is printed with the workload, the durability every contender ran at (read
back from its connection or server, and the run refuses to go on if one differs) and
the load average. The workload is :data:`common.AGENT`, a conversation shaped like an
agent's (tool calls with raw JSON arguments, tool results, an attachment, one-text
messages); one row reads a one-text-only conversation, and says so.

Sections (``SECTIONS``; another backend adds its own):

``sqlite``, run once with ``synchronous=FULL`` and once with ``NORMAL``, every store in
WAL mode, every call through a worker thread (the peers run each call in one; ours is
called through ``asyncio.to_thread``):

- *the comparison*, every measure interleaved: save at turn 20 and 2,000, one handle,
  and two handles alternating on one session (each save then made by a handle that did
  not write the last version). Ours saves the whole transcript; the peers' ``add_items`` appends the one new message,
  their cheapest write. Read of 2,000 messages (ours by a handle of its own; a read always
  reads the rows), and ``json.loads`` of those messages' codec JSON alone. The total of
  growing a 2,000-turn conversation and the file it leaves;
- *the floor*: each whole save timed against SQL that does less, over hundreds of
  rounds, interleaved (the order rotating every round), each contender on a file of its
  own that only it writes, made the same way (the same store wrote its first 1,999
  messages). The physical floor is one ``INSERT`` of the same row and its commit's
  fsync, on a plain ``sqlite3`` connection, through the same thread hop; with two
  connections alternating, for the two-handle save. "SQL alone" is a contender's own
  statements for one save, no Python around them. Ratios are medians of each round's
  ratio (the two calls a few milliseconds apart), with the interquartile range.

``postgres``: our ``PostgresStore`` against ``SQLAlchemySession`` on
``postgresql+asyncpg``, both on the event loop, on one database of a durable
throwaway server (``storetest.databases.throwaway("postgres", durable=True)``: fsync,
``synchronous_commit`` and ``full_page_writes`` on): the same saves and reads.
``SQLiteSession`` has no PostgreSQL form.

``redis``: our ``RedisStore`` against the SDK's ``RedisSession``
(``agents.extensions.memory``), both on one redis-server started for the run with AOF
on and ``appendfsync always`` (every write fsynced before Redis replies; the settings
are read back with ``CONFIG GET`` and printed), each on a ``redis.asyncio`` client of
its own, on the event loop: the same saves and reads.
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
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar, Final

from common import (
    AGENT,
    ONE_TEXT,
    agent_messages,
    as_agents_item,
    durability_line,
    load_average,
    one_text_messages,
    sqlite_durability,
)

from reference_stores.sqlite import SQLiteStore, _columns
from storetest.codec import encode_message
from storetest.contract import Message

INSTALL = 'pip install "storetest[bench]"   (openai-agents, sqlalchemy[asyncio], aiosqlite)'
TURNS = 2000
SMALL = 20
LEVELS = {"NORMAL": 1, "FULL": 2}


def _conversation(session: str, n: int) -> list[Message]:
    """Sessions named ``text-...`` hold the one-text conversation; the rest the agent's."""
    return one_text_messages(n) if session.startswith("text") else agent_messages(n)


class _Transcripts:
    """Our side's transcripts: per session, one list growing as an agent's does."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.convs: dict[str, list[Message]] = {}
        self.transcripts: dict[str, list[Message]] = {}

    def _transcript(self, session: str, n: int) -> list[Message]:
        kind = "text" if session.startswith("text") else "agent"
        if kind not in self.convs:
            self.convs[kind] = _conversation(kind, self.n)
        conv = self.convs[kind]
        transcript = self.transcripts.setdefault(session, [])
        del transcript[n:]
        transcript.extend(conv[len(transcript) : n])
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
            # Every read reads and decodes the rows (none is served from memory); the
            # reader is a handle like the others: it remembers what its first read found,
            # and a read of the version it remembers keeps that (Remembered.wants_read).
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

    async def durability(self) -> str:
        return sqlite_durability(self._handle("a")._conn)

    async def close(self) -> None:
        for store in self.handles.values():
            store.close()


class _Peer:
    name = ""

    def __init__(self, path: Path, synchronous: str, n: int) -> None:
        self.path = path
        self.synchronous = synchronous
        self.n = n
        self.items: dict[bool, list[dict[str, Any]]] = {}
        self.handles: dict[tuple[str, str], Any] = {}

    def _items(self, session: str) -> list[dict[str, Any]]:
        kind = session.startswith("text")
        if kind not in self.items:
            self.items[kind] = [as_agents_item(m) for m in _conversation(session, self.n)]
        return self.items[kind]

    def _make(self, session: str) -> Any:
        raise NotImplementedError

    def _handle(self, session: str, which: str) -> Any:
        if (session, which) not in self.handles:
            self.handles[(session, which)] = self._make(session)
        return self.handles[(session, which)]

    async def setup(self, session: str, n: int, *, handles: tuple[str, ...]) -> None:
        await self._handle(session, handles[0]).add_items(self._items(session)[:n])
        for other in handles[1:]:
            await self._handle(session, other).get_items()

    async def turn(self, session: str, n: int, which: str) -> None:
        """The peer's cheapest write before request n: append message n alone."""
        await self._handle(session, which).add_items([self._items(session)[n - 1]])

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

    async def durability(self) -> str:
        handle = self._handle("probe", "a")
        return await asyncio.to_thread(lambda: sqlite_durability(handle._get_connection()))


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
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA synchronous = {level}")
            cursor.close()

    def _make(self, session: str) -> Any:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        return SQLAlchemySession(session, engine=self.engine, create_tables=True)

    async def durability(self) -> str:
        from sqlalchemy import text

        await self._handle("probe", "a").get_items()  # creates the tables, connects
        async with self.engine.connect() as conn:
            journal = (await conn.execute(text("PRAGMA journal_mode"))).scalar()
            level = (await conn.execute(text("PRAGMA synchronous"))).scalar()
        return durability_line(journal, level)

    async def close(self) -> None:
        await super().close()
        await self.engine.dispose()


# -- the comparison ----------------------------------------------------------------

CONTENDERS = (Ours, PeerSQLiteSession, PeerSQLAlchemySession)

# (session, messages before the first measured save, handles): a replica joins by reading.
_SETUPS: list[tuple[str, int, tuple[str, ...]]] = [
    ("one-20", SMALL - 1, ("a",)),
    ("one-2000", TURNS - 1, ("a",)),
    ("two-20", SMALL - 1, ("a", "b")),
    ("two-2000", TURNS - 1, ("a", "b")),
    ("text-2000", TURNS, ("a",)),
]
# (label, session, size at the first round, handles taking turns; none for a read)
_MEASURES: list[tuple[str, str, int, str]] = [
    ("save@20 one", "one-20", SMALL, "a"),
    ("save@2000 one", "one-2000", TURNS, "a"),
    ("save@20 two", "two-20", SMALL, "ab"),
    ("save@2000 two", "two-2000", TURNS, "ab"),
    ("read 2000", "one-2000", TURNS, ""),
    ("read 2000, one-text messages only", "text-2000", TURNS, ""),
]
#: ``--reads``: only the read rows (and, on SQLite, the json.loads floor); no saves
#: measured, no 2,000-turn conversation grown, no floor run.
READS_ONLY = False


def _measures() -> list[tuple[str, str, int, str]]:
    return [m for m in _MEASURES if not m[3]] if READS_ONLY else _MEASURES


async def _round(stores: list[Any], r: int, results: dict[str, dict[str, list[float]]]) -> None:
    """Round ``r``: measure by measure, the contenders taking turns in a rotating order."""
    order = stores[r % len(stores) :] + stores[: r % len(stores)]
    for label, session, size, handles in _measures():
        for store in order:
            call = store.turn(session, size + r, handles[r % len(handles)]) if handles else store.read(session)
            start = time.perf_counter()
            await call
            results[store.name].setdefault(label, []).append((time.perf_counter() - start) * 1000)


async def _durabilities(stores: list[Any], synchronous: str) -> dict[str, str]:
    found = {store.name: await store.durability() for store in stores}
    want = f"journal_mode=wal, synchronous={synchronous}"
    for name, got in found.items():
        if got != want:
            raise SystemExit(f"{name}: {got}, not {want}")
    return found


async def run_comparison(base: Path, synchronous: str, repeats: int) -> dict[str, Any]:
    n = TURNS + repeats + 2
    stores = [make(base / f"{make.__name__}-{synchronous}.sqlite", synchronous, n) for make in CONTENDERS]
    results: dict[str, dict[str, list[float]]] = {s.name: {} for s in stores}
    try:
        durability = await _durabilities(stores, synchronous)
        for store in stores:
            for session, size, handles in _SETUPS:
                await store.setup(session, size, handles=handles)
        # What a store keeping every message as JSON parses for the read: the codec's text.
        bodies = [encode_message(m) for m in agent_messages(TURNS)]
        for r in range(repeats):
            await _round(stores, r, results)
            start = time.perf_counter()
            for body in bodies:
                json.loads(body)
            results.setdefault("json.loads floor", {}).setdefault("read 2000", []).append(
                (time.perf_counter() - start) * 1000
            )
    finally:
        for store in stores:
            await store.close()
    medians = {name: {k: statistics.median(v) for k, v in got.items()} for name, got in results.items()}
    if READS_ONLY:
        return {"medians": medians, "totals": None, "sizes": None, "durability": durability}

    # A whole conversation, grown as an agent grows it, each contender in a file of its
    # own; turn by turn, the contenders take turns in a rotating order.
    growing = [
        make(base / f"{make.__name__}-{synchronous}-conversation.sqlite", synchronous, TURNS) for make in CONTENDERS
    ]
    totals: dict[str, float] = {store.name: 0.0 for store in growing}
    try:
        for turn in range(1, TURNS + 1):
            for store in growing[turn % len(growing) :] + growing[: turn % len(growing)]:
                start = time.perf_counter()
                await store.turn("conversation", turn, "a")
                totals[store.name] += (time.perf_counter() - start) * 1000
    finally:
        for store in growing:
            await store.close()
    sizes: dict[str, int] = {}
    for store in growing:
        with sqlite3.connect(store.path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sizes[store.name] = os.path.getsize(store.path)
    return {"medians": medians, "totals": totals, "sizes": sizes, "durability": durability}


def report_comparison(synchronous: str, result: dict[str, Any], repeats: int, load: str) -> str:
    med, totals, sizes = result["medians"], result["totals"], result["sizes"]
    ours, peer, alchemy = (c.name for c in CONTENDERS)
    lines = [
        f"#### SQLite, synchronous={synchronous}, WAL, every call through a worker thread (medians of {repeats}, ms)",
        "",
        f"Workload: {AGENT}; the last read row: {ONE_TEXT}. Durability read back: "
        + "; ".join(f"{name}: {got}" for name, got in result["durability"].items())
        + f". {load}.",
        "",
        f"| measure | {ours} | {peer} | {alchemy} | ours / SQLiteSession | ours / SQLAlchemySession |",
        "|---|---|---|---|---|---|",
    ]
    for key, *_ in _measures():
        a, b, c = med[ours][key], med[peer][key], med[alchemy][key]
        lines.append(f"| {key} | {a:.3f} | {b:.3f} | {c:.3f} | {a / b:.2f}x | {a / c:.2f}x |")
    floor = med["json.loads floor"]["read 2000"]
    lines.append(f"| json.loads of the 2,000 messages' codec JSON | {floor:.3f} | | | | |")
    if totals is None:
        return "\n".join([*lines, "", f"ours: read 2000 / json.loads = {med[ours]['read 2000'] / floor:.2f}x"])
    a, b, c = (totals[x] for x in (ours, peer, alchemy))
    lines.append(f"| 2,000-turn conversation, total | {a:.0f} | {b:.0f} | {c:.0f} | {a / b:.2f}x | {a / c:.2f}x |")
    a, b, c = (sizes[x] / 1e6 for x in (ours, peer, alchemy))
    lines.append(f"| file size (MB) | {a:.2f} | {b:.2f} | {c:.2f} | {a / b:.2f}x | {a / c:.2f}x |")
    growth_one = med[ours]["save@2000 one"] / med[ours]["save@20 one"]
    growth_two = med[ours]["save@2000 two"] / med[ours]["save@20 two"]
    lines += [
        "",
        f"ours: save@2000 / save@20 = {growth_one:.2f}x (one handle), {growth_two:.2f}x (two alternating); "
        f"read 2000 / json.loads = {med[ours]['read 2000'] / floor:.2f}x",
    ]
    return "\n".join(lines)


# -- the floor ---------------------------------------------------------------------


class _Plain:
    """Statements alone on a plain ``sqlite3`` connection (or two, taking turns) to a
    file of its own, made by the contender the statements come from."""

    name = ""
    connections = 1
    isolation_level: ClassVar[str | None] = None  # BEGIN issued by hand, as our store does

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conns = [
            sqlite3.connect(path, check_same_thread=False, isolation_level=self.isolation_level)
            for _ in range(self.connections)
        ]
        for conn in self.conns:
            conn.execute(f"PRAGMA synchronous = {synchronous}")

    def turn(self, r: int) -> None:
        """Round ``r``'s statements."""
        raise NotImplementedError

    def durability(self) -> str:
        return sqlite_durability(self.conns[0])

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


class _OursPlain(_Plain):
    """A file our store made; each round inserts the row our save at that turn inserts."""

    def __init__(self, path: Path, synchronous: str) -> None:
        super().__init__(path, synchronous)
        (self.sid,) = self.conns[0].execute("SELECT id FROM storetest_sessions").fetchone()
        (self.start,) = self.conns[0].execute("SELECT count(*) FROM storetest_messages").fetchone()


#: The floor's statement: the row our save inserts, with nothing to look up or guard.
_FLOOR_INSERT: Final = (
    "INSERT INTO storetest_messages (session_id, position, digest, role, body, kind, call_id, name) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class PhysicalFloor(_OursPlain):
    name = "one INSERT and its fsync"

    def __init__(self, path: Path, synchronous: str, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(path, synchronous)
        # Each round's parameters built beforehand: the floor is its three statements.
        self.params = [(self.sid, self.start + r, digest, *columns) for r, (digest, *columns) in enumerate(rows)]

    def turn(self, r: int) -> None:
        conn = self.conns[r % self.connections]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(_FLOOR_INSERT, self.params[r])
        conn.execute("COMMIT")


class PhysicalFloorTwo(PhysicalFloor):
    name = "one INSERT and its fsync, two connections alternating"
    connections = 2


class OursSQL(_OursPlain):
    name = "our save's SQL alone"

    def __init__(self, path: Path, synchronous: str, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(path, synchronous)
        (version,) = self.conns[0].execute("SELECT version FROM storetest_sessions").fetchone()
        self.params = [
            (self.start + r, digest, *columns, b"floor", version) for r, (digest, *columns) in enumerate(rows)
        ]

    def turn(self, r: int) -> None:
        # The append of a handle that remembers the session: one statement, guarded by
        # the version it remembers, its own transaction (reference_stores.sqlite._append).
        cursor = self.conns[0].execute(
            "INSERT INTO storetest_messages (session_id, position, digest, role, body, kind, call_id, name) "
            "SELECT id, ?, ?, ?, ?, ?, ?, ? FROM storetest_sessions WHERE session = ? AND version = ?",
            self.params[r],
        )
        if cursor.rowcount != 1:
            raise RuntimeError("our save's SQL inserted nothing: the session's version moved")


class PeerSQL(_Plain):
    """What ``SQLiteSession.add_items`` sends, on the module's implicit transactions."""

    name = "SQLiteSession's add_items SQL alone"
    isolation_level = "DEFERRED"

    def __init__(self, path: Path, synchronous: str, items: list[str]) -> None:
        super().__init__(path, synchronous)
        self.items = items

    def turn(self, r: int) -> None:
        conn = self.conns[0]
        conn.execute("INSERT OR IGNORE INTO agent_sessions (session_id) VALUES (?)", ("floor",))
        conn.executemany(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)", [("floor", self.items[r])]
        )
        conn.execute("UPDATE agent_sessions SET updated_at = CURRENT_TIMESTAMP WHERE session_id = ?", ("floor",))
        conn.commit()


def empty_wals(directory: Path) -> None:
    """Checkpoint every SQLite file in ``directory`` and truncate its WAL (stopping if
    one is busy), so every contender starts its first round with no WAL."""
    for path in sorted(directory.glob("*.sqlite")):
        with closing(sqlite3.connect(path)) as conn:
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise SystemExit(f"floor: the WAL of {path.name} could not be emptied")


#: The contender ``run_floor(..., old_harness=True)`` adds.
OLD_HARNESS: Final = "ours one, timed as before"


async def run_floor(base: Path, synchronous: str, rounds: int, *, old_harness: bool = False) -> dict[str, Any]:
    """Whole saves and the SQL under them, each on a file of its own, interleaved; with
    ``old_harness``, also our save timed as this harness once timed it (:data:`OLD_HARNESS`)."""
    n = TURNS + rounds + 2
    conv = agent_messages(n)
    directory = base / f"floor-{synchronous}"
    directory.mkdir()

    def made_by_ours(name: str) -> Ours:
        return Ours(directory / f"{name}.sqlite", synchronous, n)

    ours_one, ours_two = made_by_ours("ours-one"), made_by_ours("ours-two")
    ours_old = made_by_ours("ours-old")
    await ours_one.setup("floor", TURNS - 1, handles=("a",))
    if old_harness:
        await ours_old.setup("floor", TURNS - 1, handles=("a",))
    await ours_two.setup("floor", TURNS - 1, handles=("a", "b"))
    for name in ("physical", "physical-two", "ours-sql"):
        made = made_by_ours(name)
        await made.setup("floor", TURNS - 1, handles=("a",))
        await made.close()
    peer = PeerSQLiteSession(directory / "peer.sqlite", synchronous, n)
    await peer.setup("floor", TURNS - 1, handles=("a",))
    peer_sql_maker = PeerSQLiteSession(directory / "peer-sql.sqlite", synchronous, n)
    await peer_sql_maker.setup("floor", TURNS - 1, handles=("a",))
    await peer_sql_maker.close()

    # The row our save inserts at each measured turn; a digest is a digest to the disk.
    rows = [
        (os.urandom(32), *_columns(m, encode_message(m))) for m in conv[TURNS - 1 : TURNS - 1 + rounds]
    ]
    plain: dict[str, _Plain] = {
        "floor one": PhysicalFloor(directory / "physical.sqlite", synchronous, rows),
        "floor two": PhysicalFloorTwo(directory / "physical-two.sqlite", synchronous, rows),
        "ours SQL": OursSQL(directory / "ours-sql.sqlite", synchronous, rows),
        "peer SQL": PeerSQL(
            directory / "peer-sql.sqlite", synchronous, [json.dumps(i) for i in peer._items("floor")[TURNS - 1 :]]
        ),
    }
    # Every file's WAL emptied before the first round. A handle open since its setup
    # (ours one, ours two, the peer) kept that save's WAL (1.4-1.8 MB) and wrapped it
    # around round 190-240, while the files whose setup connection closed started with
    # none and appended to it, each fsync also committing a longer file, until round
    # ~420: over those rounds our save's cheap syncs met the floor's dear ones (0.81-0.95x
    # its SQL alone in rounds 200-400, 1.15x after), so a run's median hung on its length.
    empty_wals(directory)
    # Each contender's round: what the agent does first (extend its transcript, pick its
    # item), untimed, then the one timed call: for ours and the floors alike the save
    # handed to a thread, ``await asyncio.to_thread(f, *args)``. Our save's round once
    # also timed that bookkeeping and a coroutine more than the floor's (OLD_HARNESS;
    # docs/performance.md, "The floor, round by round").
    Round = Callable[[int], tuple[Callable[..., Any], tuple[Any, ...]]]

    def saving(made: Ours, handle: Callable[[int], str]) -> Round:
        return lambda r: (made._handle(handle(r)).save, ("floor", made._transcript("floor", TURNS + r)))

    peer_handle, peer_items = peer._handle("floor", "a"), peer._items("floor")
    rounds_of: dict[str, Round] = {
        "ours one": saving(ours_one, lambda r: "a"),
        "ours two": saving(ours_two, lambda r: "ab"[r % 2]),
        "peer add_items": lambda r: (peer_handle.add_items, ([peer_items[TURNS + r - 1]],)),
    }

    def statements(floor: _Plain) -> Round:
        return lambda r: (floor.turn, (r,))

    rounds_of.update({key: statements(floor) for key, floor in plain.items()})
    asynchronous = {"peer add_items"}  # SQLiteSession's add_items is a coroutine of its own
    if old_harness:
        rounds_of[OLD_HARNESS] = lambda r: (ours_old.turn, ("floor", TURNS + r, "a"))
        asynchronous.add(OLD_HARNESS)
    durability = {
        "ours": await ours_one.durability(),
        "SQLiteSession": await peer.durability(),
        **{key: floor.durability() for key, floor in plain.items()},
    }
    want = f"journal_mode=wal, synchronous={synchronous}"
    for key, got in durability.items():
        if got != want:
            raise SystemExit(f"floor, {key}: {got}, not {want}")
    times: dict[str, list[float]] = {key: [] for key in rounds_of}
    order = list(rounds_of)
    try:
        for r in range(rounds):
            turn = order[r % len(order) :] + order[: r % len(order)]
            if (r // len(order)) % 2:
                turn.reverse()
            for key in turn:
                call, args = rounds_of[key](r)
                if key in asynchronous:
                    start = time.perf_counter()
                    await call(*args)
                else:
                    start = time.perf_counter()
                    await asyncio.to_thread(call, *args)
                times[key].append((time.perf_counter() - start) * 1000)
    finally:
        await ours_one.close()
        await ours_two.close()
        await ours_old.close()
        await peer.close()
        for floor in plain.values():
            floor.close()
    return {"times": times, "durability": durability}


def _paired(times: dict[str, list[float]], a: str, b: str) -> str:
    ratios = sorted(x / y for x, y in zip(times[a], times[b], strict=True))
    q1, q2, q3 = statistics.quantiles(ratios, n=4)
    return f"{q2:.2f}x ({q1:.2f}-{q3:.2f})"


#: (what, whole, under it) rows of the floor table.
FLOOR_RATIOS = [
    ("our save, one handle / one INSERT and its fsync (the goal: 1.10x)", "ours one", "floor one"),
    ("our save, two handles alternating / one INSERT and its fsync", "ours two", "floor one"),
    ("our save, two handles alternating / the same, two connections alternating", "ours two", "floor two"),
    ("our save / its SQL alone", "ours one", "ours SQL"),
    ("our save's SQL alone / one INSERT and its fsync", "ours SQL", "floor one"),
    ("SQLiteSession add_items / its SQL alone", "peer add_items", "peer SQL"),
    ("SQLiteSession add_items / one INSERT and its fsync", "peer add_items", "floor one"),
    ("our save, one handle / SQLiteSession add_items", "ours one", "peer add_items"),
    ("our save's SQL alone / SQLiteSession add_items", "ours SQL", "peer add_items"),
]


def report_floor(synchronous: str, result: dict[str, Any], rounds: int, load: str) -> str:
    times = result["times"]
    lines = [
        f"#### SQLite floor, synchronous={synchronous}, save at turn 2,000, {rounds} interleaved rounds",
        "",
        f"Workload: {AGENT}, one message more per save. Every contender on a file of its own, through "
        f"`asyncio.to_thread`. Durability read back: all {result['durability']['ours']}. {load}.",
        "",
        "| call | median (ms) |",
        "|---|---|",
    ]
    for key, got in times.items():
        lines.append(f"| {key} | {statistics.median(got):.3f} |")
    lines += ["", "| ratio (median of per-round ratios, interquartile range) | |", "|---|---|"]
    for what, a, b in FLOOR_RATIOS:
        lines.append(f"| {what} | {_paired(times, a, b)} |")
    return "\n".join(lines)


async def sqlite_section(args: argparse.Namespace) -> str:
    parts = []
    with tempfile.TemporaryDirectory(prefix="storetest-peers-", dir=os.environ.get("TMPDIR", "/tmp")) as tmp:
        for synchronous in args.synchronous or ["FULL", "NORMAL"]:
            base = Path(tmp) / synchronous
            base.mkdir()
            result = await run_comparison(base, synchronous, args.repeats)
            parts.append(report_comparison(synchronous, result, args.repeats, load_average()))
            if READS_ONLY:
                continue
            floor = await run_floor(base, synchronous, args.floor_rounds)
            parts.append(report_floor(synchronous, floor, args.floor_rounds, load_average()))
    return "\n\n".join(parts)


# -- PostgreSQL --------------------------------------------------------------------


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


def report_pair(
    title: str, ours: str, peer: str, short: str, med: dict[str, dict[str, float]], repeats: int, durability: str
) -> str:
    lines = [
        f"#### {title} (medians of {repeats}, ms)",
        "",
        f"Workload: {AGENT}; the last read row: {ONE_TEXT}. Durability read back from the server "
        f"(both stores on it): {durability}. {load_average()}.",
        "",
        f"| measure | {ours} | {peer} | ours / {short} |",
        "|---|---|---|---|",
    ]
    for key, *_ in _measures():
        a, c = med[ours][key], med[peer][key]
        lines.append(f"| {key} | {a:.3f} | {c:.3f} | {a / c:.2f}x |")
    if READS_ONLY:
        return "\n".join(lines)
    growth_one = med[ours]["save@2000 one"] / med[ours]["save@20 one"]
    growth_two = med[ours]["save@2000 two"] / med[ours]["save@20 two"]
    lines += ["", f"ours: save@2000 / save@20 = {growth_one:.2f}x (one handle), {growth_two:.2f}x (two alternating)"]
    return "\n".join(lines)


async def postgres_section(args: argparse.Namespace) -> str:
    from common import server_durability

    from storetest import databases

    with databases.throwaway("postgres", durable=True) as url:
        durability = server_durability("postgres", url)
        med = await run_postgres(url, args.repeats)
    return report_pair(
        "PostgreSQL 15, durable, both on the event loop",
        OursPostgres.name,
        PeerSQLAlchemyPostgres.name,
        "SQLAlchemySession",
        med,
        args.repeats,
        durability,
    )


# -- Redis -------------------------------------------------------------------------


class OursRedis(OursPostgres):
    name = "storetest RedisStore"

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


async def redis_section(args: argparse.Namespace) -> str:
    """Both contenders on one redis-server of the run's own, AOF fsynced on every write."""
    from storetest._engine.servers import redis as redis_databases

    with tempfile.TemporaryDirectory(prefix="storetest-peers-redis-") as tmp:
        server = redis_databases.start_server(Path(tmp), config=REDIS_DURABILITY)
        try:
            settings, med = await run_redis(server.url, args.repeats)
        finally:
            os.kill(server.pid, signal.SIGTERM)
            os.waitpid(server.pid, 0)
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    return report_pair(
        "Redis 7, one server, both on the event loop",
        OursRedis.name,
        PeerRedisSession.name,
        "RedisSession",
        med,
        args.repeats,
        shown,
    )


#: Section name -> an async function of the parsed arguments returning its report
#: (Markdown). It raises ``databases.Unavailable`` or ``ImportError`` to be reported as
#: skipped. A backend's section slots in here.
SECTIONS: dict[str, Callable[[argparse.Namespace], Awaitable[str]]] = {
    "sqlite": sqlite_section,
    "postgres": postgres_section,
    "redis": redis_section,
}


def main(argv: list[str] | None = None) -> int:
    from storetest import databases

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds of the comparison (default 15)")
    parser.add_argument("--floor-rounds", type=int, default=400, help="interleaved rounds of the floor (default 400)")
    parser.add_argument("--synchronous", action="append", choices=sorted(LEVELS), help="SQLite; default: both")
    parser.add_argument("--section", action="append", choices=sorted(SECTIONS), help="repeatable; default: all")
    parser.add_argument(
        "--reads", action="store_true", help="the read rows only: no saves, no conversation grown, no floor"
    )
    args = parser.parse_args(argv)
    global READS_ONLY
    READS_ONLY = args.reads
    if args.floor_rounds < 4:
        parser.error("--floor-rounds must be at least 4 (the quartiles need them)")
    try:
        import aiosqlite  # noqa: F401
        import sqlalchemy.ext.asyncio  # noqa: F401
        from agents import SQLiteSession  # noqa: F401
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession  # noqa: F401
    except ImportError as exc:
        print(f"benchmarks/peers.py needs the peers it compares against: {exc}.")
        print(f"Install them with: {INSTALL}")
        return 2
    for name in args.section or list(SECTIONS):
        try:
            print(asyncio.run(SECTIONS[name](args)), flush=True)
        except (databases.Unavailable, ImportError) as exc:
            print(f"#### {name}: skipped ({exc})")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
