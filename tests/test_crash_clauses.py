"""The crash clauses' plumbing: opt-in (skipped without ``reopen=``, saying how in the
caller's terms), a ``reopen`` a child cannot import refused up front, a ``reopen`` that
cannot open the data a killed process left is a failure, and a passing clause reports
its kills. What they catch is in tests/test_broken_stores.py (the crash variants, 20
seeds each); the reference stores pass them in their conformance runs and in
tests/test_crash_log_stores.py."""

from __future__ import annotations

import multiprocessing
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference_stores.jsonl_log import JsonlLogStore
from storetest import OutcomeUnknown, check, run_conformance

ROOT = Path(__file__).resolve().parent.parent
CRASH = ["saves_survive_a_crash", "steers_survive_a_crash", "log_appends_survive_a_crash", "items_survive_a_crash"]


def jsonl(tmp_path: Path) -> JsonlLogStore:
    return JsonlLogStore(tmp_path / "sessions")


def unopenable(tmp_path: Path) -> JsonlLogStore:
    raise RuntimeError("no such store")


def test_without_reopen_the_crash_clauses_are_skipped_saying_how() -> None:
    report = check(jsonl, clauses=CRASH, seed=1)
    outcomes = {r.clause: (r.outcome, r.diagnosis) for r in report.results}
    assert outcomes["log_appends_survive_a_crash"][0] == "skipped"
    assert "pass reopen=<factory> to check()" in outcomes["log_appends_survive_a_crash"][1]
    assert {o for c, (o, _) in outcomes.items() if c != "log_appends_survive_a_crash"} == {"not claimed"}


def test_a_reopen_a_child_cannot_import_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where children are spawned; forked, any reopen works (tests/test_forked_children.py)."""
    monkeypatch.setenv("STORETEST_CHILDREN", "spawn")
    with pytest.raises(TypeError, match="top level of an importable module"):
        check(jsonl, reopen=lambda tmp_path: JsonlLogStore(tmp_path))
    with pytest.raises(TypeError, match=re.escape("run_conformance(reopen=...)")):
        run_conformance(jsonl, reopen=lambda tmp_path: JsonlLogStore(tmp_path))


def test_a_reopen_that_cannot_open_the_data_fails_the_clause() -> None:
    (result,) = check(jsonl, clauses=["log_appends_survive_a_crash"], reopen=unopenable, seed=1).results
    assert result.outcome == "failed", result
    assert "opening the data with reopen raised RuntimeError: no such store" in result.details


def pooled(pool: object) -> JsonlLogStore:
    raise AssertionError("never called: its parameter cannot reach a child process")


def test_a_reopen_given_a_live_object_is_told_to_take_a_location() -> None:
    (result,) = check(jsonl, clauses=["log_appends_survive_a_crash"], reopen=pooled, seed=1,
                      fixtures={"pool": lambda: None}).results
    assert result.outcome == "failed" and "give reopen the data's location" in result.diagnosis, result


def test_a_passing_crash_clause_reports_its_kills() -> None:
    (result,) = check(jsonl, clauses=["log_appends_survive_a_crash"], reopen=jsonl, seed=3).results
    assert result.outcome == "passed", result.details
    assert result.diagnosis.startswith("24 kills in "), result.diagnosis
    assert "calls acknowledged" in result.diagnosis and "deaths by SIGKILL" in result.diagnosis


class _HangsInChildren(JsonlLogStore):
    """Correct here; in a child process every append hangs."""

    def append(self, session: str, entries: Any) -> None:
        if multiprocessing.parent_process() is not None:
            time.sleep(60)
        super().append(session, entries)


def hangs_in_children(tmp_path: Path) -> JsonlLogStore:
    return _HangsInChildren(tmp_path / "sessions")


def test_a_call_in_the_child_has_the_runs_deadline() -> None:
    """The killed children's calls have the run's deadline (here 1 s, not the default
    60 s), and a call past it is reported as that call's, not as opening the data."""
    (result,) = check(hangs_in_children, clauses=["log_appends_survive_a_crash"], reopen=hangs_in_children,
                      seed=1, call_timeout=1).results
    assert result.outcome == "failed", result
    assert re.search(r"in the child process, call #\d+ raised StuckCall: append\(.* did not return within 1 s",
                     result.details), result.details


class _UnknownInChildren(JsonlLogStore):
    """In a child process, the first append's outcome is unknown (nothing written)."""

    def append(self, session: str, entries: Any) -> None:
        if multiprocessing.parent_process() is not None:
            raise OutcomeUnknown("append: the connection was lost after the commit was sent")
        super().append(session, entries)


def closing_fails_in_children(tmp_path: Path) -> Iterator[JsonlLogStore]:
    yield _UnknownInChildren(tmp_path / "sessions")
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("the teardown failed")


def test_a_childs_teardown_error_is_named_as_its_teardown() -> None:
    (result,) = check(closing_fails_in_children, clauses=["log_appends_survive_a_crash"],
                      reopen=closing_fails_in_children, seed=1).results
    assert result.outcome == "failed", result
    assert ("in the child process, closing the store (reopen's teardown) raised RuntimeError: the teardown failed"
            in result.details), result.details


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "storetest.cli", "check", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **env})


def test_storetest_check_reopen(tmp_path: Path) -> None:
    """``--reopen`` runs them; without it the skip names the flag; a lambda is a usage error
    where children are spawned (forked, it runs: tests/test_forked_children.py)."""
    (tmp_path / "stores.py").write_text(textwrap.dedent("""
        from reference_stores.jsonl_log import JsonlLogStore
        def make(tmp_path):
            return JsonlLogStore(tmp_path / "sessions")
        nameless = lambda tmp_path: make(tmp_path)
    """))
    ran = _cli("stores.py:make", "--reopen", "stores.py:make", "-k", "log_appends_survive", cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "pass  log_appends_survive_a_crash" in ran.stdout and "24 kills in" in ran.stdout
    skipped = _cli("stores.py:make", "-k", "log_appends_survive", "-q", cwd=tmp_path)
    assert skipped.returncode == 0 and "pass --reopen MODULE:FACTORY" in " ".join(skipped.stdout.split()), \
        skipped.stdout
    refused = _cli("stores.py:make", "--reopen", "stores.py:nameless", cwd=tmp_path, STORETEST_CHILDREN="spawn")
    assert refused.returncode == 4 and "importable module" in refused.stderr, refused.stderr


def test_threads_sharing_a_zygote_each_get_their_own_child() -> None:
    """A crash clause left in a call by a runner's timeout can still fork while the next
    test's crash clause uses the same zygote: each asks and is answered in turn."""
    from concurrent.futures import ThreadPoolExecutor

    from storetest._engine.crashing import Zygote

    zygote = Zygote(("os:getcwd", ""))
    try:
        def lives(_: int) -> list[tuple[int, str]]:
            seen = []
            for _ in range(40):
                # The child's work, os.getpid(made, fifo), raises: it exits with status 1.
                with zygote.child("os:getpid", ()) as child:
                    pass
                seen.append((child.pid, child.life.death))
            return seen

        with ThreadPoolExecutor(4) as pool:
            every = [life for lives_ in pool.map(lives, range(4)) for life in lives_]
        assert len({pid for pid, _ in every}) == len(every) == 160
        assert {death for _, death in every} <= {"SIGKILL", "exit status 1"}, every
    finally:
        zygote.close()


def test_a_zygote_that_stops_answering_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zygote that does not answer in time is killed and never asked again (a late
    answer would reach a later question); the next crash clause gets a new one, and the
    child's pipe is closed."""
    import os
    import signal

    from storetest._engine import crashing

    reference = ("os:getcwd", "")
    zygote = crashing.Zygote.shared(reference)
    os.kill(zygote.process.pid, signal.SIGSTOP)  # type: ignore[arg-type]
    monkeypatch.setattr(crashing, "START_TIMEOUT", 0.5)
    descriptors = len(os.listdir("/proc/self/fd"))
    for _ in range(2):  # and asked again, the same error, not a broken pipe
        with pytest.raises(RuntimeError, match="stopped answering"), zygote.child("os:getpid", ()):
            pass
    assert len(os.listdir("/proc/self/fd")) == descriptors
    monkeypatch.setattr(crashing, "START_TIMEOUT", 120.0)
    fresh = crashing.Zygote.shared(reference)
    assert fresh is not zygote
    with fresh.child("os:getpid", ()) as child:
        pass
    assert child.life.death in ("SIGKILL", "exit status 1")
