"""What an append costs as the log grows: one entry appended to a 10,000-entry log
against one appended to a 10-entry log, on the JSONL, SQLite and Redis log stores,
measured side by side in one run (the two appends alternate, so machine noise hits both).

    PYTHONPATH=. python benchmarks/log_append.py
    PYTHONPATH=. python benchmarks/log_append.py --repeats 400 --long 10000

Each store is measured at its default durability (``fsync`` / ``synchronous=FULL``)
and without it (where the index, not the disk, dominates). The goal is a ratio of at
most 2x. The last row is the control: a new JSONL handle for every append, which must
read the whole log to build its index; its ratio shows what an O(log length) append
looks like to this benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import load_average

from reference_stores.jsonl_log import JsonlLogStore
from reference_stores.sqlite_log import SQLiteLogStore
from storetest.contract import Message
from storetest.entries import Entry

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
BODY = "a message of about two hundred bytes, as a short chat turn is. " * 3


def _entry(entry_id: str, parent: str | None) -> Entry:
    return Entry.message(entry_id, parent, T0, Message.text("user", BODY))


def _fill(store: Any, session: str, n: int) -> str:
    parent: str | None = None
    for start in range(0, n, 500):
        batch = []
        for i in range(start, min(n, start + 500)):
            batch.append(_entry(f"e{i}", parent))
            parent = batch[-1].id
        store.append(session, batch)
    assert parent is not None
    return parent


def measure(open_store: Callable[[], Any], fresh: Callable[[Any], Any], short: int, long: int,
            repeats: int) -> tuple[float, float]:
    """Median milliseconds of one append to the ``short`` and the ``long`` log."""
    store = open_store()
    leaves = {"short": _fill(store, "short", short), "long": _fill(store, "long", long)}
    store.entries("short")
    store.entries("long")  # a handle in use: its index is built
    times: dict[str, list[float]] = {"short": [], "long": []}
    for n in range(repeats):
        for session in ("short", "long") if n % 2 else ("long", "short"):
            entry = _entry(f"x{n}", leaves[session])
            handle = fresh(store)
            started = time.perf_counter()
            handle.append(session, [entry])
            times[session].append((time.perf_counter() - started) * 1000)
            leaves[session] = entry.id
    closer = getattr(store, "close", None)
    if closer:
        closer()
    return statistics.median(times["short"]), statistics.median(times["long"])


class _Blocking:
    """An async log store driven from plain calls, one event loop for all of them."""

    def __init__(self, runner: asyncio.Runner, store: Any, client: Any) -> None:
        self._runner, self._store, self._client = runner, store, client

    def append(self, session: str, entries: list[Entry]) -> None:
        self._runner.run(self._store.append(session, entries))

    def entries(self, session: str) -> list[Entry]:
        return self._runner.run(self._store.entries(session))

    def close(self) -> None:
        self._runner.run(self._client.aclose())


@contextmanager
def _redis() -> Iterator[Callable[[], Any] | str]:
    """Opens RedisLogStores on a throwaway server, or says why there is none."""
    from storetest import databases

    try:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        from reference_stores.redis_log import RedisLogStore
    except ImportError as exc:
        yield f"redis-py is not installed ({exc})"
        return
    with ExitStack() as stack:
        try:
            url, prefix = stack.enter_context(databases.throwaway("redis"))
        except databases.Unavailable as exc:
            yield str(exc)
            return
        runner = stack.enter_context(asyncio.Runner())

        def open_store() -> Any:
            client = runner.run(_connect(aioredis.Redis.from_url(
                url, retry=Retry(NoBackoff(), 0), socket_timeout=5, socket_connect_timeout=5)))
            return _Blocking(runner, RedisLogStore(client, prefix=prefix), client)

        yield open_store


async def _connect(client: Any) -> Any:
    # Made on the runner's loop, where it will be used; the first round trip opens it.
    await client.ping()
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=int, default=10)
    parser.add_argument("--long", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, _redis() as redis_store:
        root = Path(tmp)

        def same(store: Any) -> Any:
            return store

        control = max(5, args.repeats // 20)  # each of its appends reads the whole log
        rows: list[tuple[str, Callable[[], Any], Callable[[Any], Any], int]] = [
            ("jsonl, fsync (default)", lambda: JsonlLogStore(root / "j1"), same, args.repeats),
            ("jsonl, no fsync", lambda: JsonlLogStore(root / "j2", fsync=False), same, args.repeats),
            ("sqlite, synchronous=FULL (default)", lambda: SQLiteLogStore(root / "s1.db"), same, args.repeats),
            ("sqlite, synchronous=NORMAL", lambda: SQLiteLogStore(root / "s2.db", durable=False), same, args.repeats),
            ("control: jsonl, no fsync, a new handle per append",
             lambda: JsonlLogStore(root / "j3", fsync=False),
             lambda store: JsonlLogStore(store.directory, fsync=False), control),
        ]
        if isinstance(redis_store, str):
            print(f"(redis skipped: {redis_store})")
        else:
            rows.insert(4, ("redis, persistence off (a throwaway server)", redis_store, same, args.repeats))
        print(f"| store | append to {args.short} entries (ms) | append to {args.long:,} entries (ms) | ratio |")
        print("|---|---|---|---|")
        for name, open_store, fresh, repeats in rows:
            short, long = measure(open_store, fresh, args.short, args.long, repeats)
            print(f"| {name} | {short:.3f} | {long:.3f} | {long / short:.2f}x |", flush=True)
        print(f"\nDurability per row, as named (the store's own settings). {load_average()}.")


if __name__ == "__main__":
    main()
