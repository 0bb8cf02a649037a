"""Crash tests for the file-backed log stores: a process appending batches is SIGKILLed
``STORETEST_LOG_KILLS`` times (default 200) per store, and after every kill the log
holds every acknowledged batch, no batch in part, and the next append works.

Every ``KILLS_PER_LOG`` kills the appender moves on to a new session, so that a check
after a kill reads a log of at most that many kills' batches (a fresh SQLite handle
reads the whole log) and the run's cost grows with the kills, not with their square.

The parent has imported everything, so each appender is a plain ``os.fork()`` (the
JSONL child even inherits the parent's up-to-date index; the SQLite child opens its own
connection, as SQLite requires after a fork). A child appends batches of 1-24 entries
of up to 6 KB each (so a batch spans many pages and a kill can land inside its
``write``), and after each append returns writes the batch number to a pipe: its
acknowledgement. The parent kills it after a random 0-25 ms (0-80 ms for SQLite,
whose child first opens a connection), reads the log, judges it,
and appends a batch of its own. Entry ids say which batch they belong to and how big it
is (``b17-3of9``), so a partial batch is recognisable even if it was never acknowledged.

Figures are printed (``pytest -s`` or ``-rP`` shows them)::

    PYTHONPATH=. pytest -s tests/test_crash_log_stores.py
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reference_stores.jsonl_log import JsonlLogStore, session_path
from reference_stores.sqlite_log import SQLiteLogStore
from storetest.contract import Message
from storetest.entries import Entry

KILLS = int(os.environ.get("STORETEST_LOG_KILLS", "200"))
KILLS_PER_LOG = 20
SESSION = "crash/test ☃"
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _batch(number: int, rng: random.Random) -> list[Entry]:
    size = rng.randint(1, 24)
    out: list[Entry] = []
    for i in range(size):
        text = "x" * rng.randint(0, 6000)
        out.append(Entry.message(f"b{number}-{i}of{size}", out[-1].id if out else None, T0,
                                 Message.text("user", text)))
    return out


def _appender(open_store: Callable[[], Any], session: str, first: int, seed: int, ack: int) -> None:
    """The child: append batches numbered from ``first`` to ``session`` until killed."""
    try:
        store = open_store()
        rng = random.Random(seed)
        number = first
        while True:
            store.append(session, _batch(number, rng))
            os.write(ack, f"{number}\n".encode())
            number += 1
    finally:
        os._exit(1)


def _judge(entries: list[Entry], acked: set[int]) -> tuple[Counter[str], set[int]]:
    """Problems found in the log, and the batch numbers whole in it."""
    problems: Counter[str] = Counter()
    seen: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}
    for e in entries:
        if not e.id.startswith("b"):
            continue  # the parent's own appends
        head, _, size = e.id[1:].partition("of")
        number, _, index = head.partition("-")
        seen.setdefault(int(number), []).append(int(index))
        sizes[int(number)] = int(size)
    whole = {n for n, idx in seen.items() if idx == list(range(sizes[n]))}
    problems["half batches"] = len(set(seen) - whole)
    problems["acknowledged batches missing"] = len(acked - whole)
    return problems, whole


def _kill_loop(open_child_store: Callable[[], Any], checker: Callable[[], Any], tmp_path: Path,
               torn_tail: Callable[[str], bool] | None = None, close_checker: bool = False,
               most_ms: float = 25) -> tuple[Counter[str], str]:
    """Kill an appender ``KILLS`` times; the figures, and the session of the last log."""
    rng = random.Random(int(os.environ.get("STORETEST_LOG_KILL_SEED", "13")))
    figures: Counter[str] = Counter()
    in_flight: dict[str, int] = {}
    acked: set[int] = set()
    first = 0
    session = SESSION
    for kill in range(KILLS):
        if kill % KILLS_PER_LOG == 0:
            session = f"{SESSION} {kill // KILLS_PER_LOG}"
            acked = set()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _appender(open_child_store, session, first, rng.randrange(2**32), write)
        os.close(write)
        time.sleep(rng.uniform(0, most_ms / 1000))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read, "rb") as pipe:
            numbers = [int(line) for line in pipe.read().split(b"\n") if line]
        acked.update(numbers)
        figures["kills"] += 1
        figures["batches acknowledged"] += len(numbers)
        if torn_tail is not None:
            figures["torn tails seen after a kill"] += torn_tail(session)
        store = checker()
        problems, whole = _judge(store.entries(session), acked)
        figures.update(problems)
        in_flight[session] = len(whole - acked)
        first = max([first - 1, *whole, *numbers]) + 1
        # The next append works (and cuts off any torn tail first).
        mine = [Entry.message(f"parent-{kill}", None, T0, Message.text("user", "after the kill"))]
        store.append(session, mine)
        after = store.entries(session)
        if after[-1:] != mine:
            figures["appends after a kill that failed"] += 1
        figures["entries in the last log"] = len(after)
        if close_checker:
            store.close()  # a SQLite connection must not cross a fork
    figures["batches whole but never acknowledged (in flight)"] = sum(in_flight.values())
    return figures, session


def _report(name: str, figures: Counter[str]) -> None:
    sys.stdout.write(f"\nSIGKILL {name}: " + ", ".join(f"{k} {v}" for k, v in figures.items()) + "\n")
    for key in ("half batches", "acknowledged batches missing", "appends after a kill that failed"):
        assert figures[key] == 0, f"{name}: {key}: {figures[key]}"
    assert figures["kills"] == KILLS and figures["batches acknowledged"] > 0


@pytest.mark.parametrize("fsync", [True, False], ids=["fsync", "no-fsync"])
def test_sigkill_of_a_jsonl_appender(tmp_path: Path, fsync: bool) -> None:
    """Kills inside a batch's ``write`` leave whole lines of half a batch: the ``more``
    marks leave them out, and the next append cuts them off."""
    store = JsonlLogStore(tmp_path / "sessions", fsync=fsync)

    def torn(session: str) -> bool:
        path = session_path(store.directory, session)
        data = path.read_bytes() if path.exists() else b""
        # Whole batches end in a line without "more"; anything after the last is torn.
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1] if data else b""
        return bool(data) and (not data.endswith(b"\n") or b'"more":true' in last)

    figures, last = _kill_loop(lambda: store, lambda: store, tmp_path, torn)
    assert len(JsonlLogStore(store.directory).entries(last)) == figures["entries in the last log"]
    _report(f"jsonl ({'fsync' if fsync else 'no fsync'})", figures)


def test_sigkill_of_a_sqlite_appender(tmp_path: Path) -> None:
    db = tmp_path / "logs.db"
    SQLiteLogStore(db).close()
    figures, _ = _kill_loop(lambda: SQLiteLogStore(db), lambda: SQLiteLogStore(db), tmp_path, close_checker=True,
                            most_ms=80)
    _report("sqlite", figures)
