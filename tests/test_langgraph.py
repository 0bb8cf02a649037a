"""The LangGraph checkpointer binding: what it opens and closes, which API it drives on
which handle, a saver with one API judged on it, the errors a misuse gets, that
importing storetest imports no LangGraph, that its races overlap, and the docs lines
on LangGraph's own savers (the Postgres saver's NUL defect found by its clause)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver

from storetest import check, checkpointers
from storetest.bindings.langgraph import apis_of, langgraph
from storetest.clauses import CLAUSES
from tests.checkpointers import MaintainedSaver, memory_saver
from tests.overlap import SIX_ROUNDS
from tests.pages import run_conformance_lines

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINT_CLAUSES = [c.name for c in CLAUSES if "checkpoints" in c.needs]


def test_importing_storetest_and_its_clauses_imports_no_langgraph() -> None:
    code = ("import sys, storetest, storetest.clauses, storetest.bindings.langgraph; "
            "print('langgraph' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_without_langgraph_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.checkpoint.base", None)
    with pytest.raises(ImportError, match=r"storetest\[langgraph\]"):
        langgraph()


def test_misuse_gets_an_error_that_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="outer factory"):
        checkpointers(3)
    (result,) = check(checkpointers(lambda: object()), clauses=["checkpoint_parents_form_a_tree"], seed=1).results
    assert result.outcome == "error" and "a LangGraph saver" in result.diagnosis, result.diagnosis
    (result,) = check(checkpointers(lambda: BaseCheckpointSaver()), clauses=["checkpoint_parents_form_a_tree"],
                      seed=1).results
    assert result.outcome == "error" and "overrides neither" in result.diagnosis, result.diagnosis


class _Counting(InMemorySaver):
    """Counts the calls of each method, sync and async, on one backend directory."""

    calls: ClassVar[dict[str, int]] = {}

    def put(self, *args: Any, **kwargs: Any) -> Any:
        _Counting.calls["put"] = _Counting.calls.get("put", 0) + 1
        return super().put(*args, **kwargs)

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        _Counting.calls["aput"] = _Counting.calls.get("aput", 0) + 1
        return await super().aput(*args, **kwargs)


_OPENED: list[str] = []
_CLOSED: list[str] = []


def _opening(tmp_path: Path) -> Iterator[InMemorySaver]:
    _OPENED.append(str(tmp_path))
    yield memory_saver(tmp_path, _Counting)
    _CLOSED.append(str(tmp_path))


def test_a_replica_clause_opens_two_savers_on_one_backend_one_per_api_and_closes_both() -> None:
    """The factory's handle drives the async API, the replica's the sync one; both are
    opened on one backend and torn down."""
    _OPENED.clear(), _CLOSED.clear()
    _Counting.calls = {}
    report = check(checkpointers(_opening), clauses=["checkpoint_handles_see_each_other_at_once"], seed=1)
    assert report.ok, str(report)
    assert len(_OPENED) == 2 and len(set(_OPENED)) == 1 and _CLOSED == _OPENED
    assert _Counting.calls["aput"] >= 2 and _Counting.calls["put"] - _Counting.calls["aput"] >= 2, _Counting.calls


class _SyncOnly(BaseCheckpointSaver[str]):
    """A saver with the sync methods only, over an in-memory saver."""

    def __init__(self, inner: InMemorySaver) -> None:
        super().__init__()
        self.inner = inner

    def get_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        return self.inner.list(config, **kwargs)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)


class _AsyncOnly(_SyncOnly):
    """A saver with the async methods only (the sync ones are the base class's)."""

    get_tuple = BaseCheckpointSaver.get_tuple  # type: ignore[assignment]
    list = BaseCheckpointSaver.list  # type: ignore[assignment]
    put = BaseCheckpointSaver.put  # type: ignore[assignment]
    put_writes = BaseCheckpointSaver.put_writes  # type: ignore[assignment]
    delete_thread = BaseCheckpointSaver.delete_thread  # type: ignore[assignment]

    async def aget_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        for found in self.inner.list(config, **kwargs):
            yield found

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)


@pytest.mark.parametrize(("kind", "api"), [(_SyncOnly, "sync"), (_AsyncOnly, "async")])
def test_a_saver_with_one_api_is_judged_on_it_and_the_report_says_which(kind: type[_SyncOnly], api: str) -> None:
    assert apis_of(kind(InMemorySaver())) == (api,)
    assert apis_of(InMemorySaver()) == ("async", "sync")
    bound = checkpointers(lambda tmp_path: kind(memory_saver(tmp_path)))
    clauses = ["checkpoint_sync_and_async_apis_agree", "checkpoints_round_trip_exactly",
               "checkpoint_handles_see_each_other_at_once"]
    report = check(bound, clauses=clauses, seed=3)
    assert report.ok, str(report)
    said = next(r.diagnosis for r in report.results if r.clause == clauses[0])
    assert said == f"the saver overrides only its {api} methods: every clause judged it through them", said


class _Overlapping(_AsyncOnly):
    """An async-only saver (so both handles of a replica race are tasks on one loop)
    counting, per thread, the puts, writes and deletes inside it at once."""

    most: ClassVar[dict[str, int]] = {}
    now: ClassVar[dict[str, int]] = {}

    async def _inside(self, thread: str, work: Any) -> Any:
        if "fresh" in thread:  # a fresh backend's round: each handle puts its own thread
            thread = "fresh round " + thread.rsplit("cp-fresh", 1)[1].rsplit("-", 1)[0]
        self.now[thread] = self.now.get(thread, 0) + 1
        self.most[thread] = max(self.most.get(thread, 0), self.now[thread])
        try:
            await asyncio.sleep(0)  # a round trip
            return work()
        finally:
            self.now[thread] -= 1

    async def aput(self, config: Any, *args: Any) -> Any:
        return await self._inside(config["configurable"]["thread_id"], lambda: self.inner.put(config, *args))

    async def aput_writes(self, config: Any, *args: Any) -> None:
        await self._inside(config["configurable"]["thread_id"], lambda: self.inner.put_writes(config, *args))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._inside(thread_id, lambda: self.inner.delete_thread(thread_id))


def _overlapping(tmp_path: Path) -> _Overlapping:
    return _Overlapping(memory_saver(tmp_path))


RACES = ["parallel_put_writes_lose_nothing", "checkpoint_handles_putting_to_one_thread_lose_nothing",
         "delete_racing_put_leaves_no_part", "checkpoint_first_calls_on_a_fresh_backend_succeed"]


def test_every_checkpoint_race_is_here() -> None:
    assert sorted([*RACES, "put_writes_from_processes_lose_nothing"]) == sorted(
        c.name for c in CLAUSES if c.races and "checkpoints" in c.needs)


@pytest.mark.parametrize("clause", RACES)
def test_checkpoint_races_overlap_their_callers(clause: str) -> None:
    """In most rounds of every race, two or more calls were inside the saver at once."""
    _Overlapping.most, _Overlapping.now = {}, {}
    report = check(checkpointers(_overlapping), clauses=[clause], seed=11, profile=SIX_ROUNDS)
    assert report.results[0].outcome == "passed", report.results[0].details
    rounds = {t: n for t, n in _Overlapping.most.items()
              if any(k in t for k in ("parallel", "delrace", "fresh", "cp-two")) and not t.endswith(":1")}
    assert rounds, f"{clause} ran no rounds"
    overlapped = sum(n >= 2 for n in rounds.values())
    assert overlapped > len(rounds) / 2, f"{clause}: only {overlapped} of {len(rounds)} rounds overlapped"


def test_the_docs_lines_drive_langgraphs_own_savers(request: pytest.FixtureRequest) -> None:
    """docs/langgraph.md's lines, as they are there (test_the_lines_are_the_pages checks
    it): the SQLite saver passes the clauses below (its writes from three processes
    too); the Postgres saver's NUL defect is found by its clause, and the rest pass."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    sqlite_line = checkpointers(lambda tmp_path: AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.db")))
    postgres_line = checkpointers(lambda storetest_postgres_url: AsyncPostgresSaver.from_conn_string(
        storetest_postgres_url))
    clauses = ["checkpoint_values_keep_nul", "checkpoint_list_filters_before_and_limit",
               "checkpoint_handles_see_each_other_at_once", "put_writes_from_processes_lose_nothing",
               "checkpoints_survive_a_crash"]
    report = check(sqlite_line, clauses=clauses, seed=1, fixtures=request.getfixturevalue, reopen=sqlite_line)
    assert report.capabilities == ("checkpoints",) and report.ok, str(report)
    optional = ["copy_thread_copies_every_checkpoint_and_write", "prune_keeps_each_namespaces_latest_whole",
                "delete_for_runs_removes_those_runs_only"]
    report = check(postgres_line, clauses=clauses[:3] + optional, seed=1, fixtures=request.getfixturevalue)
    outcomes = {r.clause: r.outcome for r in report.results}
    # AsyncPostgresSaver overrides prune (and aprune), not copy_thread or delete_for_runs.
    assert outcomes == {clauses[0]: "failed", clauses[1]: "passed", clauses[2]: "passed", optional[0]: "not claimed",
                        optional[1]: "passed", optional[2]: "not claimed"}, str(report)
    assert "UntranslatableCharacter: unsupported Unicode escape sequence" in report.results[0].diagnosis


_ENVS: dict[tuple[int, str], Any] = {}


def lmdb_saver(tmp_path: Path) -> Any:  # LMDB opens a directory once per process: the handles share it
    import os

    import lmdb
    from langgraph_checkpoint_lmdb import AsyncLMDBSaver

    key = (os.getpid(), str(tmp_path))
    if key not in _ENVS:
        _ENVS[key] = lmdb.open(str(tmp_path), max_dbs=4)
    return AsyncLMDBSaver(_ENVS[key])


def test_the_docs_lines_drive_the_third_party_savers(request: pytest.FixtureRequest) -> None:
    """docs/langgraph.md's lines for the third-party savers, as they are there: each
    runs, and the clause given finds one of its defects (tests/ecosystem/langgraph.py)."""
    from langgraph.checkpoint.hotkv import AsyncHotKVSaver
    from langgraph.checkpoint.mysql.asyncmy import AsyncMySaver
    from langgraph_checkpoint_objectstorage import ObjectStorageSaver
    from langgraph_checkpoint_plainredis import AsyncRedisSaver

    lines = [
        (checkpointers(lambda storetest_mysql_url: AsyncMySaver.from_conn_string(storetest_mysql_url)),
         "checkpoints_round_trip_exactly", "expected bytes, got bytearray"),
        (checkpointers(lambda storetest_redis_url, storetest_redis_prefix: AsyncRedisSaver(
            url=storetest_redis_url, prefix=storetest_redis_prefix), api="async"),
         "checkpoint_threads_and_namespaces_are_isolated", "without escaping the separator"),
        (checkpointers(lambda storetest_redis_url, storetest_redis_prefix: AsyncHotKVSaver.from_conn_string(
            storetest_redis_url, prefix=storetest_redis_prefix)),
         "checkpoint_parents_form_a_tree", "a branch's checkpoint"),
        (checkpointers(lambda tmp_path: ObjectStorageSaver.from_conn_string(f"file://{tmp_path}")),
         "checkpoint_list_filters_before_and_limit", "limit"),
        (checkpointers(lmdb_saver), "checkpoint_list_filters_before_and_limit", "too many"),
    ]
    for line, clause, diagnosis in lines:
        report = check(line, clauses=[clause], seed=1, fixtures=request.getfixturevalue)
        (result,) = report.results
        assert result.outcome == "failed" and diagnosis in result.diagnosis, f"{line!r}: {result.details}"


def test_api_names_the_one_api_to_drive() -> None:
    """``api="async"`` drives a saver whose sync methods only raise on its async API; an
    API the saver does not override, or no API at all, is an error that says so."""

    class AsyncOnly(InMemorySaver):
        def put(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("use the async API")

    async def aput(self: Any, *args: Any, **kwargs: Any) -> Any:
        return InMemorySaver.put(self, *args, **kwargs)

    AsyncOnly.aput = aput  # type: ignore[method-assign]
    clause = "checkpoint_handles_see_each_other_at_once"  # the replica handle drives the sync API
    both = check(checkpointers(lambda tmp_path: memory_saver(tmp_path, AsyncOnly)), clauses=[clause], seed=1)
    assert both.results[0].outcome == "failed", str(both)  # the replica drove the raising sync put
    one = check(checkpointers(lambda tmp_path: memory_saver(tmp_path, AsyncOnly), api="async"), clauses=[clause],
                seed=1)
    assert one.results[0].outcome == "passed", one.results[0].details

    class SyncOnly(InMemorySaver):
        aput = aget_tuple = BaseCheckpointSaver.aput  # the base class's, as if not overridden

    wrong = check(checkpointers(lambda tmp_path: memory_saver(tmp_path, SyncOnly), api="async"), clauses=[clause],
                  seed=1)
    assert "does not override all of aput" in str(wrong), str(wrong)
    with pytest.raises(ValueError, match="'async' or 'sync'"):
        checkpointers(lambda: InMemorySaver(), api="both")


class _SyncPruneOnly(InMemorySaver):
    """Overrides the sync prune alone (as a saver written sync-first may)."""

    prune = MaintainedSaver.prune


OPTIONAL = ["copy_thread_copies_every_checkpoint_and_write", "prune_keeps_each_namespaces_latest_whole",
            "delete_for_runs_removes_those_runs_only"]


@pytest.mark.parametrize("kind", [InMemorySaver, _SyncPruneOnly, MaintainedSaver], ids=lambda k: k.__name__)
def test_an_optional_method_is_claimed_by_a_saver_that_overrides_it(kind: type[InMemorySaver]) -> None:
    """copy_thread, prune and delete_for_runs are judged where the saver overrides them
    (through the API it overrides them in: a sync prune from the async handle too), and
    are not claimed, saying why, where it does not."""
    report = check(checkpointers(lambda tmp_path: memory_saver(tmp_path, kind)), clauses=OPTIONAL, seed=3)
    outcomes = {r.clause: r.outcome for r in report.results}
    claimed = {"copy_thread", "prune", "delete_for_runs"} & {n for n in dir(kind) if n in vars(kind)}
    for clause, name in zip(OPTIONAL, ("copy_thread", "prune", "delete_for_runs"), strict=True):
        if name in claimed:
            assert outcomes[clause] == "passed", str(report)
        else:
            result = next(r for r in report.results if r.clause == clause)
            assert result.outcome == "not claimed", str(report)
            assert f"does not override {name} (BaseCheckpointSaver's raises NotImplementedError" in result.diagnosis
    assert set(report.capabilities) == {"checkpoints", *claimed}, report.capabilities


def test_the_command_takes_the_binding_by_name(tmp_path: Path) -> None:
    """``storetest check file.py:savers`` runs the clauses on the binding the file names."""
    (tmp_path / "test_savers.py").write_text(
        "from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver\n"
        "from storetest import checkpointers\n\n"
        "savers = checkpointers(lambda tmp_path: AsyncSqliteSaver.from_conn_string(str(tmp_path / 'cp.db')))\n",
        encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "test_savers.py:savers", "-q", "--seed", "1",
                           "-k", "checkpoint_parents_form_a_tree or checkpoint_writes_are_idempotent_and_ordered"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 0 failed" in done.stdout, done.stdout


def test_the_lines_are_the_pages() -> None:
    source = " ".join(Path(__file__).read_text(encoding="utf-8").split())
    lines = run_conformance_lines("langgraph.md")
    assert len(lines) == 7
    for line in lines:
        assert line in source, line
