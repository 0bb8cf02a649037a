"""The item-history contract and its binding: the type-strict comparison, one session
object per (handle, id), what the binding closes, and the errors a misuse gets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from storetest import check
from storetest._engine.item_diagnosis import describe_item, describe_item_id_merge, describe_limit
from storetest.bindings.openai_agents import item_sessions, owned
from storetest.clauses import CLAUSES
from storetest.items import first_difference, same_value
from tests.item_histories import MemorySession, backend_for
from tests.overlap import SIX_ROUNDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("sent", "got"), [
    (1, 1.0), (1, True), (1.0, True), (0, False), ([1], (1,)), ("1", 1), (None, "null"),
    ({"a": 1}, {"a": 1, "b": 2}), ({"a": [1, 2]}, {"a": [2, 1]}), (2**53 + 1, float(2**53 + 1)),
])
def test_the_comparison_is_type_strict(sent: object, got: object) -> None:
    assert not same_value(sent, got)
    assert first_difference(sent, got) is not None


def test_key_order_is_not_part_of_the_promise() -> None:
    assert same_value({"a": 1, "b": [1.0, {"c": None, "d": True}]}, {"b": [1.0, {"d": True, "c": None}], "a": 1})


def test_diagnoses_name_the_damage() -> None:
    call = {"type": "function_call", "arguments": '{"z":1,"a":[1, 2],"z":3}'}
    assert "raw JSON re-encoded" in describe_item(call, {**call, "arguments": '{"a": [1, 2], "z": 3}'})
    assert "came back as the integer 1" in describe_item({"n": 1.0}, {"n": 1})
    assert "through a double" in describe_item({"n": 2**53 + 1}, {"n": float(2**53 + 1)})
    assert "oldest 2" in describe_limit([{"i": 0}, {"i": 1}, {"i": 2}], 2, [{"i": 0}, {"i": 1}])
    assert "key scheme" in describe_item_id_merge("s-x", "s-x:messages")
    assert "glob" in describe_item_id_merge("s-x*", "s-xa")


class _Closing(MemorySession):
    closed: ClassVar[list[str]] = []

    async def close(self) -> None:
        self.closed.append(self.session_id)


class _Engine:
    disposed = 0

    async def dispose(self) -> None:
        _Engine.disposed += 1


def test_one_object_per_handle_and_id_and_everything_opened_is_closed(tmp_path: Path) -> None:
    """The binding opens each id once per handle, two handles for the replica clause,
    and closes every session, then what the factory handed to owned()."""
    opened: list[str] = []
    backend: Any = (asyncio.Lock(), {})

    def factory(tmp_path: Path) -> Any:
        owned(_Engine())

        def opener(session_id: str) -> _Closing:
            opened.append(session_id)
            return _Closing(backend, session_id)

        return opener

    _Closing.closed = []
    report = check(item_sessions(factory), clauses=["item_replicas_see_each_others_writes"], seed=1)
    assert report.ok, str(report)
    assert len(opened) == 2 and len(set(opened)) == 1  # one id, once per handle
    assert sorted(_Closing.closed) == sorted(opened)
    assert _Engine.disposed == 2


def test_an_outer_factory_that_returns_no_opener_is_told_what_to_return() -> None:
    report = check(item_sessions(lambda: 42), clauses=["items_keep_their_order"], seed=1)
    (result,) = report.results
    assert result.outcome == "error" and "not an opener" in result.diagnosis, result.diagnosis


def test_an_opener_that_returns_no_session_is_named() -> None:
    report = check(item_sessions(lambda: lambda session_id: object()), clauses=["items_keep_their_order"], seed=1)
    (result,) = report.results
    assert "has no get_items, add_items, pop_item, clear_session" in result.details + result.diagnosis


def test_owned_outside_a_factory_is_refused() -> None:
    with pytest.raises(RuntimeError, match="inside an item_sessions outer factory"):
        owned(object())


class _Counting(MemorySession):
    """A correct item session that counts the calls in flight, per session."""

    now = 0
    most: ClassVar[dict[str, int]] = {}

    async def _counted(self, name: str, *args: Any) -> Any:
        _Counting.now += 1
        self.most[self.session_id] = max(self.most.get(self.session_id, 0), _Counting.now)
        try:
            return await getattr(MemorySession, name)(self, *args)
        finally:
            _Counting.now -= 1

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await self._counted("get_items", limit)  # type: ignore[no-any-return]

    async def add_items(self, items: list[Any]) -> None:
        await self._counted("add_items", items)

    async def pop_item(self) -> Any:
        return await self._counted("pop_item")

    async def clear_session(self) -> None:
        await self._counted("clear_session")


async def _counting_sessions(tmp_path: Path) -> Any:
    backend = backend_for(tmp_path)
    return lambda session_id: _Counting(backend, session_id)


#: In-process races (the process clause's overlap shows in its broken store being caught:
#: item_variants' items-processes-item-by-item).
ITEM_RACES = [c.name for c in CLAUSES if c.races and c.needs == {"items"} and not c.processes]


@pytest.mark.parametrize("clause", ITEM_RACES)
def test_item_races_overlap_their_callers(clause: str) -> None:
    """In most rounds of every item race, two or more calls were inside the session's
    methods at once (a race that never overlaps proves nothing)."""
    _Counting.most = {}
    report = check(item_sessions(_counting_sessions), clauses=[clause], seed=11, profile=SIX_ROUNDS)
    assert report.results[0].outcome == "passed", report.results[0].details
    kinds = ("race", "atomic", "interleave", "many", "fresh")
    rounds = {s: n for s, n in _Counting.most.items() if any(k in s for k in kinds) and "fresh-read" not in s}
    assert rounds, f"{clause} ran no rounds"
    overlapped = sum(n >= 2 for n in rounds.values())
    assert overlapped > len(rounds) / 2, f"{clause}: only {overlapped} of {len(rounds)} rounds overlapped"


class _RefusesNul(MemorySession):
    """Refuses an id with NUL before writing anything, as a Postgres text key does."""

    async def add_items(self, items: list[Any]) -> None:
        if "\x00" in self.session_id:
            raise ValueError("invalid byte sequence for encoding UTF8: 0x00")
        await super().add_items(items)


class _NulPoisons(_RefusesNul):
    """Refuses the same way, but every later call on the backend fails (an aborted transaction)."""

    async def add_items(self, items: list[Any]) -> None:
        if self.lock.__dict__.get("poisoned"):
            raise RuntimeError("current transaction is aborted, commands ignored")
        try:
            await super().add_items(items)
        except ValueError:
            self.lock.__dict__["poisoned"] = True
            raise


def _sessions_of(cls: type) -> Any:
    async def factory(tmp_path: Path) -> Any:
        backend = backend_for(tmp_path)
        return lambda session_id: cls(backend, session_id)
    return factory


def test_an_id_refused_cleanly_is_a_limit_in_the_report() -> None:
    report = check(item_sessions(_sessions_of(_RefusesNul)), clauses=["item_sessions_are_isolated"], seed=1)
    (result,) = report.results
    assert result.outcome == "passed", result.details
    (limit,) = result.limits
    assert limit.startswith("2 session id(s) refused (ValueError)") and "\\x00" in limit, limit
    assert "limit: 2 session id(s) refused" in str(report)


def test_a_refusal_that_breaks_the_handle_is_a_failure() -> None:
    report = check(item_sessions(_sessions_of(_NulPoisons)), clauses=["item_sessions_are_isolated"], seed=1)
    (result,) = report.results
    assert result.outcome == "failed"
    assert "left the handle unusable" in result.diagnosis, result.diagnosis


def test_a_lambda_factory_skips_the_process_clause_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """When children are spawned (forked ones inherit a lambda: tests/test_forked_children.py)."""
    monkeypatch.setenv("STORETEST_CHILDREN", "spawn")
    report = check(item_sessions(lambda tmp_path: None), clauses=["adds_from_processes_land_whole"], seed=1)
    (result,) = report.results
    assert result.outcome == "skipped"
    assert "cannot be opened in a child process" in result.diagnosis and "lambda" in result.diagnosis


def test_a_fresh_backend_is_fresh_per_round(tmp_path: Path) -> None:
    """The first-calls clause gets a new directory (a new database on a server) each round."""
    seen: list[Path] = []

    async def factory(tmp_path: Path) -> Any:
        seen.append(tmp_path)
        backend = backend_for(tmp_path)
        return lambda session_id: MemorySession(backend, session_id)

    report = check(item_sessions(factory), clauses=["first_calls_on_a_fresh_backend_succeed"], seed=1)
    assert report.ok, str(report)
    fresh = seen[2:]  # after the clause's own store and replica: 4 handles a round
    assert len(fresh) >= 12 and len(set(fresh)) == len(fresh) // 4 and seen[0] not in fresh


def test_the_command_runs_an_item_history(tmp_path: Path) -> None:
    """``storetest check module:binding`` runs the item clauses and claims nothing else."""
    report = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", "tests.item_histories:sqlite_items", "-q", "--seed", "3",
         "-k", "items_keep_their_order,item_replicas_see_each_others_writes,save_replaces",
         "--report", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = json.loads(report.read_text())["runs"]
    outcomes = {r["clause"]: r["outcome"] for r in run["results"]}
    assert outcomes["items_keep_their_order"] == outcomes["item_replicas_see_each_others_writes"] == "passed"
    assert outcomes.get("save_replaces_the_transcript", "not claimed") == "not claimed"
