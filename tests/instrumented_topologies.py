"""Correct stores that record how they are used, cell by cell of the topology and
option model (:mod:`storetest._engine.topologies`): callers in flight at once, factory
calls and backends per session id, constructors at once on a fresh backend, child
processes writing, and each protocol option against what the session holds.

``measure_topologies(seed)`` runs the default profile's clauses that use these shapes
against them and returns each cell's hits.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reference_stores.memory import MemoryStore
from storetest import adk_sessions, chat_histories, check, item_sessions
from storetest._engine.inputs import Cell
from storetest._engine.topologies import Shapes
from tests.adk_services import MemorySessionService
from tests.broken_stores.chat_variants import MemoryChatHistory
from tests.item_histories import MemorySession, SQLiteItemSession, backend_for

__all__ = ["measure_topologies"]

CURRENT: list[Shapes] = []
_HANDLES = itertools.count()


def _shapes() -> Shapes:
    return CURRENT[-1]


class _Tracked:
    """Counts a call in flight on ``shapes`` while it runs."""

    def __init__(self, protocol: str, session: str, kind: str, backend: str, handle: int) -> None:
        self.args = (protocol, session, kind, backend, handle)

    def __enter__(self) -> None:
        _shapes().enter(*self.args)

    def __exit__(self, *exc: object) -> None:
        protocol, session, kind, _, handle = self.args
        _shapes().leave(protocol, session, kind, handle)


class TrackedSession(MemorySession):
    def __init__(self, backend: Any, session_id: str, where: str, handle: int) -> None:
        super().__init__(backend, session_id)
        self.where, self.handle = where, handle

    def _in(self, kind: str) -> _Tracked:
        return _Tracked("items", self.session_id, kind, self.where, self.handle)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        with self._in("get"):
            n = len(self.items)
            for name, hit in (("0", limit == 0), ("1", limit == 1 and n > 1), ("N (the item count)", limit == n > 1),
                              ("N + 1", n > 0 and limit == n + 1), ("none", limit is None and n > 0)):
                if hit:
                    _shapes().hit("items", "get_items(limit)", f"limit {name}")
            return await super().get_items(limit)

    async def add_items(self, items: list[Any]) -> None:
        with self._in("add"):
            await super().add_items(items)

    async def pop_item(self) -> Any:
        with self._in("pop"):
            return await super().pop_item()

    async def clear_session(self) -> None:
        with self._in("clear"):
            await super().clear_session()


async def tracked_sessions(tmp_path: Path) -> Callable[[str], TrackedSession]:
    backend, handle = backend_for(tmp_path), next(_HANDLES)
    return lambda session_id: TrackedSession(backend, session_id, str(tmp_path), handle)


#: Where each writer's process id goes (set by measure_topologies, read by child processes).
PIDS = "STORETEST_TOPOLOGY_PIDS"


class PidSession(SQLiteItemSession):
    """The SQLite history, noting each writer's process in the file named by ``$STORETEST_TOPOLOGY_PIDS``."""

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        with open(os.environ[PIDS], "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")


def pid_sessions(tmp_path: Path) -> Callable[[str], PidSession]:
    return lambda session_id: PidSession(session_id, tmp_path / "items.db")


_CONSTRUCTING: dict[str, list[int]] = {}  # backend -> [constructors running, first calls running, calls done]
_LOCK = threading.Lock()


class TrackedChat(MemoryChatHistory):
    """The correct memory chat history, noting constructors and first calls on a fresh backend."""

    def __init__(self, tmp_path: Path, session_id: str) -> None:
        key = str(tmp_path)
        with _LOCK:
            state = _CONSTRUCTING.setdefault(key, [0, 0, 0])
            state[0] += 1
            arrived = state[0]
            if arrived >= 4 and not state[2]:
                _shapes().hit("chat histories", "fresh backend", "4 constructors at once")
        # A constructor's round trips, longer for each later arrival: the first ones
        # finish and start their first calls while the last still runs.
        time.sleep(0.002 * arrived)
        with _LOCK:
            if state[1]:
                _shapes().hit("chat histories", "fresh backend", "a constructor while another handle's first call runs")
            state[0] -= 1
        super().__init__(tmp_path, session_id)
        self.key = key

    def _first(self, call: Callable[[], Any]) -> Any:
        with _LOCK:
            state = _CONSTRUCTING[self.key]
            state[1] += 1
            if state[1] >= 4 and not state[2] and not state[0]:
                _shapes().hit("chat histories", "fresh backend", "4 first calls at once, constructed before")
        try:
            time.sleep(0.002)
            return call()
        finally:
            with _LOCK:
                state[1] -= 1
                state[2] += 1

    @property
    def messages(self) -> list[Any]:  # type: ignore[override]
        return self._first(lambda: MemoryChatHistory.messages.fget(self))  # type: ignore[attr-defined]

    def add_messages(self, messages: Sequence[Any]) -> None:
        self._first(lambda: super(TrackedChat, self).add_messages(messages))


def tracked_chats(tmp_path: Path) -> Callable[[str], TrackedChat]:
    return lambda session_id: TrackedChat(tmp_path, session_id)


class TrackedADK(MemorySessionService):
    """The memory ADK service, noting each option against the session it reads."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.where, self.handle = str(tmp_path), next(_HANDLES)

    async def get_session(self, *, app_name: str, user_id: str, session_id: str, config: Any = None) -> Any:
        with _Tracked("adk", f"{app_name}/{user_id}/{session_id}", "get", self.where, self.handle):
            s = self.sessions.get((app_name, user_id, session_id))
            if s is not None and config is not None:
                _options(s.events, config)
            return await super().get_session(app_name=app_name, user_id=user_id, session_id=session_id,
                                             config=config)

    async def append_event(self, session: Any, event: Any) -> Any:
        with _Tracked("adk", f"{session.app_name}/{session.user_id}/{session.id}", "append", self.where,
                      self.handle):
            return await super().append_event(session, event)

    async def list_sessions(self, *, app_name: str, user_id: Any = None) -> Any:
        listed = [s for (a, u, _), s in self.sessions.items() if a == app_name and user_id in (u, None)]
        _shapes().hit("adk", "list_sessions", "by app, every user" if user_id is None else "by app and user")
        if any(s.events for s in listed):
            _shapes().hit("adk", "list_sessions", "a listed session that holds events")
        return await super().list_sessions(app_name=app_name, user_id=user_id)


def _options(events: list[Any], config: Any) -> None:
    n, recent, after = len(events), config.num_recent_events, config.after_timestamp
    field = "GetSessionConfig.num_recent_events"
    for name, hit in (("0", recent == 0), ("1", recent == 1 and n > 1), ("N (the event count)", recent == n > 1),
                      ("N + 1", n > 0 and recent == n + 1)):
        if hit:
            _shapes().hit("adk", field, name)
    stamps = [e.timestamp for e in events]
    if after is not None and len(stamps) > 1:
        where = ("before the first event" if after < stamps[0] else "after the last event" if after > stamps[-1]
                 else "at an event's timestamp" if after in stamps else "between two events")
        _shapes().hit("adk", "GetSessionConfig.after_timestamp", where)
        if recent is not None:
            _shapes().hit("adk", "GetSessionConfig", "num_recent_events and after_timestamp together")


class TrackedStore(MemoryStore):
    """The in-memory reference store, noting takes of one queue at once."""

    async def take_steers(self, session: str) -> list[str]:
        with _Tracked("transcripts", session, "take", "memory", 0):
            await asyncio.sleep(0)  # a round trip: the racing takers are all in flight here
            return await super().take_steers(session)


def measure_topologies(seed: int) -> Counter[Cell]:
    """Every topology and option cell's hits in one default-profile run of the clauses
    that use them, against correct instrumented stores.

    :raises AssertionError: a clause failed on a correct store (a false alarm).
    """
    CURRENT.append(Shapes())
    before = os.environ.get(PIDS)
    try:
        with tempfile.TemporaryDirectory(prefix="storetest-pids-") as directory:
            os.environ[PIDS] = str(Path(directory) / "pids")
            runs = [
                check(item_sessions(tracked_sessions), seed=seed, name="tracked items", clauses=[
                    "get_items_gives_the_latest", "pop_item_hands_each_item_out_once",
                    "clear_racing_add_lands_before_or_after", "concurrent_adds_lose_nothing",
                    "item_factory_calls_share_only_their_backend", "item_replicas_see_each_others_writes"]),
                check(item_sessions(pid_sessions), seed=seed, name="tracked processes",
                      clauses=["adds_from_processes_land_whole"]),
                check(chat_histories(tracked_chats), seed=seed, name="tracked chats",
                      clauses=["first_calls_on_a_fresh_backend_succeed"]),
                check(adk_sessions(TrackedADK), seed=seed, name="tracked adk", clauses=[
                    "adk_get_session_options_select_events", "adk_list_sessions_lists_the_users",
                    "adk_replicas_see_each_others_appends"]),
                check(TrackedStore, seed=seed, name="tracked steers",
                      clauses=["steers_are_taken_exactly_once_under_concurrency"]),
            ]
            pids = Path(os.environ[PIDS]).read_text(encoding="utf-8").split()
        for pid in {int(p) for p in pids} - {os.getpid()}:
            CURRENT[-1].writer_process(pid)
        for report in runs:
            failed = [r.clause for r in report.results if r.outcome != "passed"]
            assert not failed, f"seed {seed}: a correct store did not pass {failed}: {report}"
        return CURRENT[-1].finish()
    finally:
        CURRENT.pop()
        if before is None:
            os.environ.pop(PIDS, None)
        else:
            os.environ[PIDS] = before
