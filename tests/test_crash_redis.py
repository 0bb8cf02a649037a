"""What an acknowledged write survives on Redis: the *server* is SIGKILLed at random
points while another process saves, adds and takes steers, and appends log batches,
and restarted on the same directory; then every acknowledged write must be there,
none in part.

The server is this test's own (not the run's shared one), started with the settings
under test: AOF with ``appendfsync always`` must keep everything acknowledged; with
persistence off the same check must find acknowledged writes missing (the test can
fail). ``STORETEST_REDIS_CRASH_KILLS`` kills (default 25) under ``always``, 4 with
persistence off. Figures are printed (``pytest -rP`` shows them)::

    PYTHONPATH=. pytest -rP tests/test_crash_redis.py

The writer is an ``os.fork()`` of the parent (everything imported already). It cycles
through a log append, a save, two adds and a take, and writes a line to a pipe before
each write and after each reply (its acknowledgement). The parent lets it work 30-150
ms, kills the server, then the writer, restarts the server, reads everything on a new
connection and judges:

- log: every acknowledged batch whole, no batch in part (ids say which batch and how
  big: ``b17.3of9``);
- transcript: whole, and the last acknowledged save or one attempted after it;
- steers: every acknowledged add either taken by an acknowledged take or still queued,
  unless a take was in flight at the kill (its steers may be gone); nothing taken
  twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from storetest.contract import Message
from storetest.entries import Entry

aioredis = pytest.importorskip("redis.asyncio")

from redis.asyncio.retry import Retry  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402

from reference_stores.redis_log import RedisLogStore  # noqa: E402
from storetest._databases import required_backends  # noqa: E402
from storetest._databases.redis import find_redis_server, start_server  # noqa: E402
from tests.test_crash_log_stores import T0  # noqa: E402

KILLS = int(os.environ.get("STORETEST_REDIS_CRASH_KILLS", "25"))
PREFIX = "crash:"
LOG, TRANSCRIPT, QUEUE = "crash-log", "crash-transcript", "crash-queue"
ALWAYS = {"appendonly": "yes", "appendfsync": "always"}
OFF = {"appendonly": "no", "save": ""}


def _client(url: str) -> Any:
    return aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), socket_timeout=5, socket_connect_timeout=5)


def _stores(client: Any) -> tuple[Any, Any]:
    return RedisLogStore(client, prefix=PREFIX), None


def _batch(number: int, size: int) -> list[Entry]:
    out: list[Entry] = []
    for i in range(size):
        out.append(Entry.message(f"b{number}.{i}of{size}", out[-1].id if out else None, T0,
                                 Message.text("user", "x" * 300)))
    return out


async def _write(url: str, first: int, seed: int, pipe: int) -> None:
    """The writer: until the server goes away, write and acknowledge, numbering from ``first``."""
    rng = random.Random(seed)
    client = _client(url)
    log, _ = _stores(client)

    def say(*record: object) -> None:
        os.write(pipe, (json.dumps(record) + "\n").encode())

    n = first
    while True:
        n += 1
        say("B", n)
        await log.append(LOG, _batch(n, rng.randint(1, 20)))
        say("b", n)


def _writer(url: str, first: int, seed: int, pipe: int) -> None:
    try:
        asyncio.run(_write(url, first, seed, pipe))
    finally:
        os._exit(0)


def _judge(entries: list[Entry], acked: set[int]) -> tuple[int, int, set[int]]:
    """(acknowledged batches missing, batches in part, whole batches) of the log."""
    seen: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}
    for e in entries:
        number, _, rest = e.id[1:].partition(".")
        index, _, size = rest.partition("of")
        seen.setdefault(int(number), []).append(int(index))
        sizes[int(number)] = int(size)
    whole_batches = {n for n, idx in seen.items() if idx == list(range(sizes[n]))}
    return len(acked - whole_batches), len(set(seen) - whole_batches), whole_batches


def crash_run(directory: Path, config: dict[str, str], kills: int, seed: int) -> Counter[str]:
    """Kill the server ``kills`` times; the figures."""
    rng = random.Random(seed)
    server = start_server(directory, config=config)
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    figures: Counter[str] = Counter()
    acked: set[int] = set()
    first = 0
    try:
        for _ in range(kills):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _writer(server.url, first, rng.randrange(2**32), write)
            os.close(write)
            time.sleep(rng.uniform(0.03, 0.15))
            os.kill(server.pid, signal.SIGKILL)
            os.waitpid(server.pid, 0)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            with os.fdopen(read, "rb") as pipe:
                records = [json.loads(line) for line in pipe.read().splitlines() if line.endswith(b"]")]
            figures["kills"] += 1
            for kind, value in records:
                if kind == "b":
                    acked.add(value)
                    figures["batches acknowledged"] += 1
                if kind == "B":
                    first = max(first, value)
            server = start_server(directory, port=port, config=config)

            async def read_all(url: str) -> list[Entry]:
                client = _client(url)
                try:
                    return await RedisLogStore(client, prefix=PREFIX).entries(LOG)
                finally:
                    await client.aclose()

            missing, in_part, present = _judge(asyncio.run(read_all(server.url)), acked)
            figures["acknowledged batches missing"] = max(figures["acknowledged batches missing"], missing)
            figures["batches in part"] += in_part
            figures["whole, never acknowledged"] = len(present - acked)
    finally:
        os.kill(server.pid, signal.SIGTERM)
        os.waitpid(server.pid, 0)
    return figures


def _report(name: str, figures: Counter[str]) -> None:
    shown = ", ".join(f"{k} {v}" for k, v in figures.items())
    sys.stdout.write(f"\nSIGKILL of the Redis server, {name}: {shown}\n")


def _needs_server() -> None:
    if find_redis_server() is None:
        message = "the crash test starts a redis-server of its own, and none is installed here"
        if "redis" in required_backends():
            pytest.fail(message)
        pytest.skip(message)


def test_aof_always_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    _needs_server()
    figures = crash_run(tmp_path / "always", ALWAYS, KILLS, seed=KILLS)
    _report("appendfsync always", figures)
    assert figures["kills"] == KILLS and figures["batches acknowledged"] > 0
    assert figures["acknowledged batches missing"] == 0, figures
    assert figures["batches in part"] == 0, figures


def test_without_persistence_the_same_check_finds_writes_missing(tmp_path: Path) -> None:
    _needs_server()
    figures = crash_run(tmp_path / "off", OFF, 4, seed=4)
    _report("persistence off", figures)
    assert figures["batches acknowledged"] > 0
    assert figures["acknowledged batches missing"] > 0, figures
