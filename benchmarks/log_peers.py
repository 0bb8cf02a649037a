"""Our log stores against their peers, side by side in one interleaved run: the JSONL
store against pi-mono's ``SessionManager`` (the coding agent whose file format it
follows), the SQLite and PostgreSQL log stores against LangGraph's ``SqliteSaver`` and
``PostgresSaver`` holding one turn's delta per checkpoint.

    pip install "storetest[bench]"   # langgraph-checkpoint-sqlite, -postgres (and node + npm for pi-mono)
    PYTHONPATH=. python benchmarks/log_peers.py
    PYTHONPATH=. python benchmarks/log_peers.py --repeats 400 --loads 20 --section jsonl

What is timed, per contender (median ms): one append to a 10-entry and to a
10,000-entry log, and one load of a 10,000-entry log. An append is everything from a
message to its entry persisted: ours builds the :class:`~storetest.entries.Entry` and
calls ``append``; pi-mono's ``appendMessage`` builds its entry (id, parent, time) and
writes it; LangGraph's contender builds a checkpoint whose ``messages`` channel holds
only the new entry (the delta, not the whole list, which is what LangGraph's message
state keeps and is 20-50x slower to write) and calls ``put``. A load is a fresh read of
every entry: a new ``JsonlLogStore`` handle (so it has no index and reads the file),
``SessionManager.open(file).getEntries()``, ``entries()`` on the SQL stores, and
``list()`` of the thread's checkpoints for LangGraph. Every contender gets the same
entries: :func:`common.agent_messages`, the message as our codec writes it (the peers
get that JSON parsed), in the same entry shape (type, id, parent, timestamp, message).

Interleaving: every round runs every contender of a section, in an order that rotates,
the 10- and 10,000-entry appends alternating; loads are spread over the rounds the same
way. Each contender fills its logs through its own API (the peers with ``fsync`` or
``synchronous_commit`` off while filling, set back and read back before timing).

Durability, the same for every contender of a section and read back:

- ``jsonl``: no ``fsync`` (pi-mono's ``SessionManager`` never calls one; ours runs with
  ``fsync=False``). Both sides count the ``fsync`` calls made during the timed appends
  (Python wraps ``os.fsync``, Node wraps ``node:fs``) and the run refuses to report if
  either made one. pi-mono runs in its own Node process, timed by Node's clock
  (``benchmarks/pi_sessions.mjs``), installed by this script with npm into
  ``benchmarks/.node`` (not committed); without Node or npm the section is skipped,
  saying why.
- ``sqlite``: WAL and ``synchronous=FULL`` (``--synchronous NORMAL`` for the other),
  read back from both connections with ``PRAGMA``.
- ``postgres``: a durable throwaway PostgreSQL (``storetest.databases.throwaway("postgres",
  durable=True)``: fsync, ``synchronous_commit``, ``full_page_writes`` on), read back
  from the server and ``SHOW synchronous_commit`` on both contenders' connections. Ours
  on asyncpg on the event loop (timed inside the coroutine), ``PostgresSaver`` on its
  psycopg connection (``autocommit``, as ``from_conn_string`` makes it). Ours runs
  twice, on sessions of its own: on an asyncpg pool as ``create_pool`` makes it, which
  resets a connection as it is given back (a round trip after every call), and holding
  one connection of such a pool (``hold_connection=True``), which sends nothing between
  calls, as PostgresSaver's one connection does.

The figures are ratios from one run on a shared machine; each table says the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import AGENT, agent_messages, load_average, sqlite_durability

from reference_stores.jsonl_log import JsonlLogStore
from reference_stores.sqlite_log import SQLiteLogStore
from storetest.codec import encode_message
from storetest.contract import Message
from storetest.entries import Entry

INSTALL = 'pip install "storetest[bench]"   (langgraph-checkpoint-sqlite, langgraph-checkpoint-postgres)'
#: The pi-mono release measured (``--pi-version`` for another).
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"
NODE_DIR = Path(__file__).resolve().parent / ".node"
SECTIONS = ("jsonl", "sqlite", "postgres")
SHORT, LONG = "short", "long"


class Skipped(Exception):
    """A contender cannot run here; the message says why and how to enable it."""


class _Workload:
    """Each session's next message and the id of its last entry, the same for every
    contender: message ``i`` of :func:`common.agent_messages`, entry id ``e<i>``."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.next: dict[str, int] = {}

    def take(self, session: str, n: int = 1) -> list[tuple[str, str | None, Message]]:
        start = self.next.get(session, 0)
        self.next[session] = start + n
        return [(f"e{i}", f"e{i - 1}" if i else None, self.messages[i]) for i in range(start, start + n)]


def _as_json(message: Message) -> Any:
    return json.loads(encode_message(message))


def _entry_dict(entry_id: str, parent: str | None, message: Any) -> dict[str, Any]:
    """The entry as pi-mono writes one (and as LangGraph's contender keeps it)."""
    return {"type": "message", "id": entry_id, "parentId": parent,
            "timestamp": datetime.now(UTC).isoformat(timespec="microseconds"), "message": message}


def _sessions(work: _Workload, long: int) -> list[tuple[str, int, _Workload]]:
    """The sessions every contender fills: the two appended to, and one to load (its own
    numbering, so it holds the same ``long`` entries as the long one starts with)."""
    return [(SHORT, 10, work), (LONG, long, work), ("load", long, _Workload(work.messages))]


def _same(result: Any) -> Any:
    return result


def _fill_ours(store: Any, run: Callable[[Any], Any], session: str, work: _Workload, n: int,
               prefix: str = "") -> None:
    for start in range(0, n, 500):
        batch = [Entry.message(i, p, datetime.now(UTC), m) for i, p, m in work.take(session, min(500, n - start))]
        run(store.append(prefix + session, batch))


# -- JSONL: ours against pi-mono ------------------------------------------------------


class _FsyncCounter:
    """Counts ``os.fsync`` calls (what the JSONL store calls to make an append durable)."""

    def __init__(self) -> None:
        self.calls = 0
        self._real = os.fsync

    def __enter__(self) -> _FsyncCounter:
        def counted(fd: int) -> None:
            self.calls += 1
            self._real(fd)

        os.fsync = counted  # type: ignore[assignment]
        return self

    def __exit__(self, *_: object) -> None:
        os.fsync = self._real


class OursJsonl:
    name = "ours: JsonlLogStore(fsync=False)"

    def __init__(self, root: Path, work: _Workload, long: int) -> None:
        self.directory = root / "ours-jsonl"
        self.store = JsonlLogStore(self.directory, fsync=False)
        self.work = work
        self.fsyncs = 0
        for session, n, source in _sessions(work, long):
            _fill_ours(self.store, _same, session, source, n)
        self.store.entries(SHORT)
        self.store.entries(LONG)  # a handle in use: its index is built

    def durability(self) -> str:
        return f"fsync={self.store.fsync}"

    def append(self, session: str) -> float:
        ((entry_id, parent, message),) = self.work.take(session)
        with _FsyncCounter() as counter:
            started = time.perf_counter()
            self.store.append(session, [Entry.message(entry_id, parent, datetime.now(UTC), message)])
            elapsed = time.perf_counter() - started
        self.fsyncs += counter.calls
        return elapsed * 1000

    def load(self) -> tuple[float, int]:
        started = time.perf_counter()
        entries = JsonlLogStore(self.directory, fsync=False).entries("load")
        return (time.perf_counter() - started) * 1000, len(entries)

    def close(self) -> None:
        pass


def _pi_install(version: str) -> Path:
    """``benchmarks/.node`` with pi-mono's package installed (once), or :class:`Skipped`."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise Skipped("pi-mono skipped: node and npm are needed (e.g. apt-get install nodejs npm)")
    installed = NODE_DIR / "node_modules" / PI_PACKAGE / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != version:
        NODE_DIR.mkdir(exist_ok=True)
        (NODE_DIR / ".gitignore").write_text("*\n")
        if not (NODE_DIR / "package.json").exists():
            (NODE_DIR / "package.json").write_text('{"private": true, "type": "module"}\n')
        print(f"installing {PI_PACKAGE}@{version} into {NODE_DIR} (npm, once) ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", str(NODE_DIR),
             f"{PI_PACKAGE}@{version}"],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise Skipped(f"pi-mono skipped: npm install {PI_PACKAGE}@{version} failed:\n{done.stderr[-2000:]}")
    shutil.copyfile(Path(__file__).with_name("pi_sessions.mjs"), NODE_DIR / "pi_sessions.mjs")
    return NODE_DIR / "pi_sessions.mjs"


class PiMono:
    """pi-mono's ``SessionManager`` in a Node process of its own (``pi_sessions.mjs``)."""

    def __init__(self, root: Path, work: _Workload, long: int, version: str) -> None:
        script = _pi_install(version)
        self.process = subprocess.Popen(
            ["node", str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=script.parent,
        )
        self.version = self._call({"op": "hello"})["version"]
        self.name = f"pi-mono SessionManager {self.version} (Node {_node_version()})"
        self.work = work
        self.fsyncs = 0
        directory = root / "pi"
        for session, n, source in _sessions(work, long):
            messages = [_as_json(m) for _, _, m in source.take(session, n)]
            got = self._call({"op": "fill", "session": session, "dir": str(directory / session), "messages": messages})
            assert got["entries"] == n, got

    def _call(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the Node process ended (exit code {self.process.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if not reply.pop("ok"):
            raise RuntimeError(f"pi-mono's {command['op']} failed:\n{reply['error']}")
        return reply

    def durability(self) -> str:
        return "no fsync (appendFileSync; SessionManager has no fsync setting)"

    def append(self, session: str) -> float:
        ((_, _, message),) = self.work.take(session)
        reply = self._call({"op": "append", "session": session, "message": _as_json(message)})
        self.fsyncs += reply["fsyncs"]
        return float(reply["ms"])

    def load(self) -> tuple[float, int]:
        reply = self._call({"op": "load", "session": "load"})
        return float(reply["ms"]), int(reply["entries"])

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=30)


def _node_version() -> str:
    return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()


# -- SQLite: ours against SqliteSaver -------------------------------------------------


def _checkpoint(n: int, entry: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A checkpoint holding one turn's delta, its metadata and its new channel versions."""
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint: dict[str, Any] = dict(empty_checkpoint())
    checkpoint["channel_values"] = {"messages": [entry]}
    checkpoint["channel_versions"] = {"messages": n + 1}
    checkpoint["updated_channels"] = ["messages"]
    return checkpoint, {"source": "loop", "step": n, "parents": {}}, {"messages": n + 1}


class _Saver:
    """A LangGraph checkpointer holding one thread per session, one checkpoint per entry."""

    name = ""
    saver: Any

    def _prepare(self, work: _Workload, long: int) -> None:
        self.work = work
        self.configs: dict[str, dict[str, Any]] = {}
        self.steps: dict[str, int] = {}
        for session, n, source in _sessions(work, long):
            for entry_id, parent, message in source.take(session, n):
                self._put(session, entry_id, parent, message)

    def _put(self, session: str, entry_id: str, parent: str | None, message: Message) -> None:
        config = self.configs.get(session, {"configurable": {"thread_id": session, "checkpoint_ns": ""}})
        step = self.steps.get(session, 0)
        checkpoint, metadata, versions = _checkpoint(step, _entry_dict(entry_id, parent, _as_json(message)))
        self.configs[session] = self.saver.put(config, checkpoint, metadata, versions)
        self.steps[session] = step + 1

    def append(self, session: str) -> float:
        ((entry_id, parent, message),) = self.work.take(session)
        started = time.perf_counter()
        self._put(session, entry_id, parent, message)
        return (time.perf_counter() - started) * 1000

    def load(self) -> tuple[float, int]:
        started = time.perf_counter()
        found = list(self.saver.list({"configurable": {"thread_id": "load", "checkpoint_ns": ""}}))
        return (time.perf_counter() - started) * 1000, len(found)


class LangGraphSqlite(_Saver):
    def __init__(self, root: Path, work: _Workload, long: int, synchronous: str) -> None:
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            raise Skipped(f"SqliteSaver skipped: {exc}; {INSTALL}") from None
        from importlib.metadata import version

        self.name = f"LangGraph SqliteSaver {version('langgraph-checkpoint-sqlite')}"
        self.conn = sqlite3.connect(root / "langgraph.db", check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.conn.execute("PRAGMA synchronous = OFF")  # while filling only
        self._prepare(work, long)
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")

    def durability(self) -> str:
        return sqlite_durability(self.conn)

    def close(self) -> None:
        self.conn.close()


class OursSqlite:
    name = "ours: SQLiteLogStore"

    def __init__(self, root: Path, work: _Workload, long: int, synchronous: str) -> None:
        self.store = SQLiteLogStore(root / "ours.db", durable=synchronous == "FULL")
        self.work = work
        for session, n, source in _sessions(work, long):
            _fill_ours(self.store, _same, session, source, n)

    def durability(self) -> str:
        return sqlite_durability(self.store._conn)

    def append(self, session: str) -> float:
        ((entry_id, parent, message),) = self.work.take(session)
        started = time.perf_counter()
        self.store.append(session, [Entry.message(entry_id, parent, datetime.now(UTC), message)])
        return (time.perf_counter() - started) * 1000

    def load(self) -> tuple[float, int]:
        started = time.perf_counter()
        entries = self.store.entries("load")
        return (time.perf_counter() - started) * 1000, len(entries)

    def close(self) -> None:
        self.store.close()


# -- PostgreSQL: ours against PostgresSaver ---------------------------------------------


class OursPostgres:
    """Ours on an asyncpg pool of one connection, as ``create_pool`` makes it, in one of
    two ways. By default a call takes the connection from the pool and gives it back,
    and the pool resets it as it comes back (``SELECT pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL``), a round trip of its own after every call. With
    ``hold=True`` the handle holds the connection (``hold_connection=True``) and sends
    nothing between calls, as ``PostgresSaver``'s one connection does."""

    def __init__(self, runner: asyncio.Runner, url: str, work: _Workload, long: int, hold: bool = False) -> None:
        import asyncpg

        from reference_stores.postgres_log import SCHEMA, PostgresLogStore

        self.runner = runner
        # Filled through a pool of its own with synchronous_commit off; timed on another.
        filler = runner.run(_opened(asyncpg.create_pool(url, min_size=1, max_size=1,
                                                        server_settings={"synchronous_commit": "off"})))
        runner.run(filler.execute(SCHEMA))  # idempotent
        # Each of ours on its own sessions of the one database.
        self.prefix = "held-" if hold else ""
        for session, n, source in _sessions(work, long):
            _fill_ours(PostgresLogStore(filler), runner.run, session, source, n, self.prefix)
        runner.run(filler.close())
        self.name = "ours: PostgresLogStore (asyncpg pool" + (", hold_connection=True" if hold else "") + ")"
        self.pool = runner.run(_opened(asyncpg.create_pool(url, min_size=1, max_size=1)))
        self.store = PostgresLogStore(self.pool, hold_connection=hold)
        self.work = work

    def durability(self) -> str:
        return "synchronous_commit=" + str(self.runner.run(self.pool.fetchval("SHOW synchronous_commit")))

    def append(self, session: str) -> float:
        ((entry_id, parent, message),) = self.work.take(session)

        async def timed() -> float:
            started = time.perf_counter()
            entry = Entry.message(entry_id, parent, datetime.now(UTC), message)
            await self.store.append(self.prefix + session, [entry])
            return time.perf_counter() - started

        return self.runner.run(timed()) * 1000

    def load(self) -> tuple[float, int]:
        async def timed() -> tuple[float, int]:
            started = time.perf_counter()
            entries = await self.store.entries(self.prefix + "load")
            return time.perf_counter() - started, len(entries)

        elapsed, n = self.runner.run(timed())
        return elapsed * 1000, n

    def close(self) -> None:
        self.runner.run(self.store.aclose())
        self.runner.run(self.pool.close())


async def _opened(pool: Any) -> Any:
    # Made on the runner's loop, where it will be used.
    return await pool


class LangGraphPostgres(_Saver):
    def __init__(self, url: str, work: _Workload, long: int) -> None:
        try:
            import psycopg
            from langgraph.checkpoint.postgres import PostgresSaver
            from psycopg.rows import dict_row
        except ImportError as exc:
            raise Skipped(f"PostgresSaver skipped: {exc}; {INSTALL}") from None
        from importlib.metadata import version

        self.name = f"LangGraph PostgresSaver {version('langgraph-checkpoint-postgres')} (psycopg)"
        # As PostgresSaver.from_conn_string connects.
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()
        self.conn.execute("SET synchronous_commit = off")  # while filling only
        self._prepare(work, long)
        self.conn.execute("RESET synchronous_commit")

    def durability(self) -> str:
        row = self.conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None
        return f"synchronous_commit={row['synchronous_commit']}"

    def close(self) -> None:
        self.conn.close()


# -- the run ----------------------------------------------------------------------------


def measure(contenders: list[Any], repeats: int, loads: int, long: int) -> dict[str, dict[str, list[float]]]:
    """Every contender's appends (10 and 10,000 entries) and loads, interleaved."""
    times: dict[str, dict[str, list[float]]] = {c.name: {SHORT: [], LONG: [], "load": []} for c in contenders}
    every = max(1, repeats // max(1, loads))
    for r in range(repeats):
        k = r % len(contenders)
        # The session order flips every full rotation of the contenders, so that each
        # contender meets every (place, order) pair: with both flipping every round, one
        # session always came right after the same contender's other one.
        flip = (r // len(contenders)) % 2
        for contender in contenders[k:] + contenders[:k]:
            for session in (SHORT, LONG) if flip else (LONG, SHORT):
                times[contender.name][session].append(contender.append(session))
            if r % every == every - 1 and len(times[contender.name]["load"]) < loads:
                ms, n = contender.load()
                if n != long:
                    raise RuntimeError(f"{contender.name} loaded {n} entries, not {long}")
                times[contender.name]["load"].append(ms)
        if r % max(1, repeats // 10) == 0:
            print(f"  round {r + 1}/{repeats}", file=sys.stderr, flush=True)
    return times


def report(title: str, contenders: list[Any], times: dict[str, dict[str, list[float]]], durability: str,
           repeats: int, long: int, before: str) -> str:
    med = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    lines = [
        f"#### {title}",
        "",
        f"Medians of {repeats} appends at each length and {len(next(iter(times.values()))['load'])} loads, ms; "
        f"{AGENT}. Durability, read back: {durability}. Before: {before}; after: {load_average()}.",
        "",
        f"| contender | append at 10 | append at {long:,} | {long:,} / 10 | load of {long:,} |",
        "|---|---|---|---|---|",
    ]
    for c in contenders:
        m = med[c.name]
        lines.append(f"| {c.name} | {m[SHORT]:.3f} | {m[LONG]:.3f} | {m[LONG] / m[SHORT]:.2f}x | {m['load']:.1f} |")
    *ours, peer = contenders
    for mine in ours:
        a, b = med[mine.name], med[peer.name]
        label = mine.name.removeprefix("ours: ")
        lines.append(
            f"| {label} / {peer.name.split(' (')[0]} | {a[SHORT] / b[SHORT]:.2f}x | {a[LONG] / b[LONG]:.2f}x | | "
            f"{a['load'] / b['load']:.2f}x |"
        )
    return "\n".join(lines)


def jsonl_section(args: argparse.Namespace, root: Path, work: _Workload) -> str:
    before = load_average()
    ours = OursJsonl(root, _Workload(work.messages), args.long)
    try:
        peer = PiMono(root, _Workload(work.messages), args.long, args.pi_version)
    except Skipped as exc:
        return f"#### JSONL\n\n({exc})"
    try:
        times = measure([ours, peer], args.repeats, args.loads, args.long)
    finally:
        peer.close()
    if ours.fsyncs or peer.fsyncs:
        raise RuntimeError(f"fsync calls during the timed appends: ours {ours.fsyncs}, pi-mono {peer.fsyncs}")
    durability = (f"{ours.name}: {ours.durability()}; {peer.name}: {peer.durability()}; fsync calls counted "
                  f"during the timed appends: ours {ours.fsyncs}, pi-mono {peer.fsyncs}")
    return report("JSONL: ours against pi-mono, no fsync", [ours, peer], times, durability, args.repeats,
                  args.long, before)


def sqlite_section(args: argparse.Namespace, root: Path, work: _Workload) -> str:
    before = load_average()
    ours = OursSqlite(root, _Workload(work.messages), args.long, args.synchronous)
    try:
        peer = LangGraphSqlite(root, _Workload(work.messages), args.long, args.synchronous)
    except Skipped as exc:
        return f"#### SQLite\n\n({exc})"
    found = {c.name: c.durability() for c in (ours, peer)}
    if len(set(found.values())) != 1:
        raise RuntimeError(f"the contenders' durability differs: {found}")
    try:
        times = measure([ours, peer], args.repeats, args.loads, args.long)
    finally:
        ours.close()
        peer.close()
    return report(f"SQLite: ours against SqliteSaver, WAL, synchronous={args.synchronous}", [ours, peer], times,
                  f"both {found[ours.name]}", args.repeats, args.long, before)


def postgres_section(args: argparse.Namespace, work: _Workload) -> str:
    from common import server_durability

    from storetest import databases

    before = load_average()
    with ExitStack() as stack:
        try:
            url = stack.enter_context(databases.throwaway("postgres", durable=True))
        except databases.Unavailable as exc:
            return f"#### PostgreSQL\n\n(skipped: {exc})"
        runner = stack.enter_context(asyncio.Runner())
        server = server_durability("postgres", url)
        ours = OursPostgres(runner, url, _Workload(work.messages), args.long)
        stack.callback(ours.close)
        kept = OursPostgres(runner, url, _Workload(work.messages), args.long, hold=True)
        stack.callback(kept.close)
        try:
            peer = LangGraphPostgres(url, _Workload(work.messages), args.long)
        except Skipped as exc:
            return f"#### PostgreSQL\n\n({exc})"
        stack.callback(peer.close)
        found = {c.name: c.durability() for c in (ours, kept, peer)}
        if set(found.values()) != {"synchronous_commit=on"}:
            raise RuntimeError(f"the contenders' durability differs: {found}")
        times = measure([ours, kept, peer], args.repeats, args.loads, args.long)
        return report("PostgreSQL 15: ours against PostgresSaver, durable", [ours, kept, peer], times,
                      f"server {server}; both connections {found[ours.name]}", args.repeats, args.long, before)


@contextmanager
def _directory() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="log-peers-") as tmp:
        yield Path(tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=200, help="appends at each length, per contender")
    parser.add_argument("--loads", type=int, default=10, help="loads per contender")
    parser.add_argument("--section", choices=SECTIONS, action="append", help="run only these (repeatable)")
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    parser.add_argument("--pi-version", default=PI_VERSION)
    args = parser.parse_args(argv)
    total = 3 * args.long + 2 * args.repeats + 20
    messages = agent_messages(total)
    out = []
    for section in args.section or SECTIONS:
        print(f"{section} ...", file=sys.stderr, flush=True)
        work = _Workload(messages)
        with _directory() as root:
            if section == "jsonl":
                out.append(jsonl_section(args, root, work))
            elif section == "sqlite":
                out.append(sqlite_section(args, root, work))
            else:
                out.append(postgres_section(args, work))
        print(out[-1] + "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
