"""Clauses shared among processes (``storetest check --jobs``, ``check(jobs=...)``): the
workers run clauses at the same time as the parent, the report is the one a single
process gives, a worker that dies leaves no clause without a verdict, Ctrl-C reaches
the workers through the parent, and a run that cannot share its clauses safely keeps
them in one process, saying why when sharing was asked for.

Every run here is a real ``storetest check`` in a subprocess (a test process has the
runner's threads: sharing would be refused there) on a SQLite store whose factory logs
each store's life: which process made it, and when it was opened and closed.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from storetest import check, runner
from storetest._engine import workers
from storetest.clauses import CLAUSES

ROOT = Path(__file__).resolve().parent.parent

TARGET = '''
import os, time
from pathlib import Path

from reference_stores.sqlite import SQLiteStore

LOG = Path(os.environ["WORKERS_LOG"])
PARENT = os.getpid()  # imported before the workers are forked
made = [0]


def make(tmp_path):
    """Logs "pid opened closed" per store; in a worker, as WORKERS_AT says, its second
    store is never made: the worker exits (die) or the factory blocks (block)."""
    made[0] += 1
    with open(os.environ["WORKERS_LOG"] + ".made", "a") as f:
        f.write(f"{os.getpid()}\\n")
    if os.getpid() != PARENT and made[0] == 2:
        if os.environ.get("WORKERS_AT") == "die":
            os._exit(3)
        if os.environ.get("WORKERS_AT") == "block":
            Path(os.environ["WORKERS_LOG"] + ".blocked").write_text(str(os.getpid()))
            time.sleep(60)
    opened = time.monotonic()
    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store
    with LOG.open("a") as f:
        f.write(f"{os.getpid()} {opened} {time.monotonic()}\\n")
'''


def _target(tmp_path: Path) -> Path:
    path = tmp_path / "target.py"
    path.write_text(TARGET)
    return path


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETEST_")}
    env.update(PYTHONPATH=str(ROOT), WORKERS_LOG=str(tmp_path / "stores.log"), **extra)
    return env


def _check(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = tmp_path / "report.json"
    report.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", f"{_target(tmp_path)}:make", "-q", "--report",
         str(report), *args],
        cwd=tmp_path, env=_env(tmp_path, **env), capture_output=True, text=True, timeout=300,
    )
    return done, json.loads(report.read_text())["runs"][0]


def _lives(tmp_path: Path) -> list[tuple[int, float, float]]:
    log = tmp_path / "stores.log"
    lines = log.read_text().split("\n") if log.exists() else []
    log.unlink(missing_ok=True)
    return [(int(p), float(a), float(b)) for p, a, b in (line.split() for line in lines if line)]


def _verdicts(run: dict) -> list[tuple[str, str, str]]:
    return [(r["clause"], r["outcome"], r["diagnosis"]) for r in run["results"]]


def test_two_processes_run_clauses_at_once_and_report_as_one(tmp_path: Path) -> None:
    """By default, on a machine with two CPUs or more: stores made by two processes,
    some alive at the same moment; and the verdicts, clause for clause, those of one
    process with the same seed."""
    shared, run = _check(tmp_path, "--seed", "11")
    assert shared.returncode == 0, shared.stdout + shared.stderr
    lives = _lives(tmp_path)
    one, alone = _check(tmp_path, "--seed", "11", "--jobs", "1")
    assert one.returncode == 0, one.stdout + one.stderr
    assert len({pid for pid, _, _ in _lives(tmp_path)}) == 1
    assert _verdicts(run) == _verdicts(alone)
    assert run["totals"]["passed"] == alone["totals"]["passed"] > 10
    if workers.auto_jobs() < 2:
        pytest.skip("this process may use one CPU: storetest check runs in one process (as asserted above)")
    pids = {pid for pid, _, _ in lives}
    assert len(pids) == 2, lives
    overlapping = [(a, b) for a in lives for b in lives
                   if a[0] < b[0] and a[1] < b[2] and b[1] < a[2]]
    assert overlapping, f"no two stores of different processes were open at once: {lives}"


def test_a_failure_found_in_a_worker_reads_as_in_one_process(tmp_path: Path) -> None:
    """A broken store's failures, with their details, whichever process found them."""
    target = "tests.broken_stores.sqlite_variants:json_steer_column_store"
    runs = []
    for jobs in ("2", "1"):
        report = tmp_path / f"report-{jobs}.json"
        done = subprocess.run(
            [sys.executable, "-m", "storetest.cli", "check", target, "-q", "--seed", "5", "--jobs", jobs,
             "--report", str(report)],
            cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        runs.append(json.loads(report.read_text())["runs"][0])
    shared, alone = runs
    assert _verdicts(shared) == _verdicts(alone)
    failed = [r for r in shared["results"] if r["outcome"] == "failed"]
    assert "steers_are_taken_in_order_exactly_once" in {r["clause"] for r in failed}
    assert all(r["details"] and r["violations"] for r in failed), failed


def test_a_worker_that_dies_leaves_no_clause_without_a_verdict(tmp_path: Path) -> None:
    done, run = _check(tmp_path, "--seed", "3", "--jobs", "2", WORKERS_AT="die")
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [r for r in run["results"] if r["outcome"] == "error"]
    assert len(errors) == 1, errors
    assert "exited with status 3 before its verdict" in errors[0]["diagnosis"]
    assert "--jobs 1" in errors[0]["diagnosis"]
    # The parent took every clause the worker could not: all have a verdict.
    assert run["totals"]["not reached"] == 0
    assert run["totals"]["clauses"] == len(run["results"]) > 100
    assert run["totals"]["passed"] > 10


def test_ctrl_c_reaches_a_worker_through_the_parent(tmp_path: Path) -> None:
    """The worker is in a process group of its own (the terminal's Ctrl-C reaches the
    parent alone): the parent passes it on, the worker's clause ends ``interrupted``
    and its teardown runs, and no worker outlives the run."""
    report = tmp_path / "report.json"
    blocked = tmp_path / "stores.log.blocked"
    run = subprocess.Popen(
        [sys.executable, "-m", "storetest.cli", "check", f"{_target(tmp_path)}:make", "-q", "--jobs", "2",
         "--report", str(report)],
        cwd=tmp_path, env=_env(tmp_path, WORKERS_AT="block"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not blocked.exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        worker = int(blocked.read_text())
        assert os.getpgid(worker) != run.pid  # out of the group the terminal signals
        sent = time.monotonic()
        os.killpg(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=50)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 130, out + err
    assert time.monotonic() - sent < 50  # not the factory's 60 s sleep
    result = json.loads(report.read_text())["runs"][0]
    interrupted = [r for r in result["results"] if r["outcome"] == "interrupted"]
    assert any("while the factory made the store" in r["diagnosis"] for r in interrupted), interrupted
    assert not [r for r in result["results"] if r["outcome"] in ("error", "failed")], result["results"]
    assert "interrupted" in result["interrupted"]
    with pytest.raises(ProcessLookupError):
        os.kill(worker, 0)
    assert err.count("storetest: interrupted: stopping the clause in flight") == 1, err


@pytest.mark.parametrize(("factory", "why"), [
    ("lambda: None", "the factory takes no tmp_path"),
    ("lambda storetest_postgres_url: None", "the factory takes storetest_postgres_url: two processes' clauses"),
])
def test_a_factory_whose_data_may_be_shared_keeps_to_one_process(tmp_path: Path, factory: str, why: str) -> None:
    assert why in workers.refusal([eval(factory)], None)
    assert workers.refusal([lambda tmp_path: None], {"tmp_path": tmp_path}) == (
        "the caller supplies the factories' parameters")


SHARING = '''
import socket, sys, threading
from storetest._engine.workers import refusal

def make(tmp_path):
    pass

print(repr(refusal([make], None)))
if sys.argv[1] == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
elif sys.argv[1] == "socket":
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
print(refusal([make], None))
'''


@pytest.mark.parametrize(("what", "why"), [
    ("thread", "1 other thread(s) run in this process"),
    ("socket", "this process has network connections open (127.0.0.1:"),
])
def test_a_thread_or_a_connection_keeps_the_run_in_one_process(what: str, why: str) -> None:
    done = subprocess.run([sys.executable, "-c", SHARING, what], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    before, after = done.stdout.splitlines()
    assert before == "''", done.stdout + done.stderr
    assert why in after


def test_asked_to_share_what_it_cannot_the_command_says_why(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text(textwrap.dedent('''
        from reference_stores.memory import MemoryStore

        def make():
            return MemoryStore()
    '''))
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "plain.py:make", "-q", "--jobs", "2",
                           "-k", "unknown_session_is_empty"],
                          cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("storetest check: every clause runs in this one process: the factory takes no tmp_path"
            in done.stderr)


@pytest.mark.parametrize("given", [["--jobs", "0"], ["--jobs", "many"]])
def test_a_bad_number_of_jobs_is_a_usage_error(given: list[str], tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", *given], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "give a number of processes, 1 or more, or auto" in done.stderr
    with pytest.raises(ValueError, match="jobs=0"):
        check(lambda tmp_path: None, jobs=0)


@pytest.mark.parametrize("jobs", [1, 2])
def test_storetest_jobs_in_the_environment_sets_the_default(tmp_path: Path, jobs: int) -> None:
    done, _ = _check(tmp_path, STORETEST_JOBS=str(jobs))
    assert done.returncode == 0, done.stdout + done.stderr
    assert len({pid for pid, _, _ in _lives(tmp_path)}) == jobs



ORDER = '''
import os, sys, time
from storetest import runner

LOG = sys.argv[1]
run = runner._run


def logged(c, *args, **kwargs):
    began = time.monotonic()
    try:
        return run(c, *args, **kwargs)
    finally:
        with open(LOG, "a") as f:
            f.write(f"{os.getpid()} {c.name} {int(c.races or c.processes or c.reopen)} {c.cost} {began} "
                    f"{time.monotonic()}\\n")


runner._run = logged
from storetest import cli
sys.exit(cli.main(["check", "-q", "--jobs", "2", "--seed", "2"]))
'''


def _clauses_run(tmp_path: Path) -> list[tuple[int, str, bool, int, float, float]]:
    """The default check in two processes: per clause run, (pid, clause, whether it runs
    alone, its cost, began, ended)."""
    log = tmp_path / "clauses.log"
    done = subprocess.run([sys.executable, "-c", ORDER, str(log)], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [(int(pid), name, alone == "1", int(cost), float(a), float(b))
            for pid, name, alone, cost, a, b in (line.split() for line in log.read_text().splitlines())]


def test_races_run_alone_once_the_workers_have_ended(tmp_path: Path) -> None:
    """Every clause that races threads (or kills processes) runs in the parent after
    the last clause of a worker ended; the others are shared."""
    runs = [(pid, name, alone, a, b) for pid, name, alone, _, a, b in _clauses_run(tmp_path)]
    assert len({pid for pid, *_ in runs}) == 2, runs
    racing = [r for r in runs if r[2]]
    assert len(racing) >= 4, runs
    (parent,) = {pid for pid, *_ in racing}
    worker_end = max(b for pid, _, _, _, b in runs if pid != parent)
    assert all(a >= worker_end for _, _, _, a, _ in racing), runs


def test_the_dearest_clauses_are_shared_first() -> None:
    """A state machine (``Clause.cost`` 2) taken last kept its process running it while
    the other, done, waited: the processes take the shared clauses dearest first, in
    run order within a cost; the races and the clauses that kill processes run alone."""
    shared, alone = runner._sharing(CLAUSES)
    costs = [CLAUSES[p].cost for p in shared]
    assert costs == sorted(costs, reverse=True) and costs[0] == 2 and costs[-1] == 0, costs
    assert all(a < b for a, b in itertools.pairwise(shared) if CLAUSES[a].cost == CLAUSES[b].cost)
    assert sorted(shared + alone) == list(range(len(CLAUSES)))
    assert all(CLAUSES[p].races or CLAUSES[p].processes or CLAUSES[p].reopen for p in alone)
    assert not any(CLAUSES[p].races or CLAUSES[p].processes or CLAUSES[p].reopen for p in shared)


RAISING = '''
import os, sys
sys.path.insert(0, os.getcwd())
from storetest import check
from target import make


def progress(state):
    if state.result is not None and os.path.exists(os.environ["WORKERS_LOG"] + ".made"):
        if {int(line) for line in open(os.environ["WORKERS_LOG"] + ".made")} - {os.getpid()}:
            raise RuntimeError("the caller's progress display broke")  # once a worker has made a store


try:
    check(make, jobs=2, progress=progress)
except RuntimeError as exc:
    print(exc)
workers = {int(line) for line in open(os.environ["WORKERS_LOG"] + ".made")} - {os.getpid()}
alive = []
for pid in workers:
    try:
        os.kill(pid, 0)  # a zombie (ended, not reaped) answers too
        alive.append(pid)
    except ProcessLookupError:
        pass
print(len(workers), "worker(s) made stores;", alive or "none", "alive or unreaped")
'''


def test_a_run_that_raises_leaves_no_worker_behind(tmp_path: Path) -> None:
    _target(tmp_path)
    done = subprocess.run([sys.executable, "-c", RAISING], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["the caller's progress display broke",
                                        "1 worker(s) made stores; none alive or unreaped"], done.stdout + done.stderr


RELAY_RAISES = '''
import os, sys, threading
sys.path.insert(0, os.getcwd())
from storetest import check
from target import make


def progress(state):
    # The caller's display fails on a worker's progress, on the thread that relays it.
    if threading.current_thread().name.startswith("storetest-worker"):
        raise RuntimeError("the caller's display broke on a worker's line")


try:
    check(make, jobs=2, progress=progress)
except RuntimeError as exc:
    print(exc)
'''


def test_progress_that_raises_for_a_worker_neither_hangs_nor_is_lost(tmp_path: Path) -> None:
    """The relay thread reads the worker's pipe to its end whatever the caller's
    ``progress`` raises (a worker blocked on a full pipe would never end); the
    exception comes out of ``check()``, as in one process."""
    _target(tmp_path)
    done = subprocess.run([sys.executable, "-c", RELAY_RAISES], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "the caller's display broke on a worker's line", done.stdout + done.stderr


SILENT_DEATH = '''
import os, sys
from storetest import runner
from storetest._engine import workers

send = workers.Team.send
said = [0]


def send_then_die(self, *message):
    # A worker killed between taking a clause and saying so: its second take is never told.
    if message[0] == "took":
        said[0] += 1
        if said[0] == 2:
            os._exit(7)
    send(self, *message)


workers.Team.send = send_then_die
from storetest import cli
sys.exit(cli.main(["check", "-q", "--jobs", "2", "--seed", "4", "--report", "report.json"]))
'''


def test_a_clause_taken_by_a_worker_that_died_before_saying_so_is_an_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SILENT_DEATH], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    run = json.loads((tmp_path / "report.json").read_text())["runs"][0]
    assert run["totals"]["clauses"] == len(run["results"]) == 105, run["totals"]
    errors = [r for r in run["results"] if r["outcome"] == "error"]
    assert len(errors) == 1 and "exited with status 7 before its verdict" in errors[0]["diagnosis"], errors


FAILING = '''
import os, time

from reference_stores.sqlite import SQLiteStore

PARENT = os.getpid()  # imported before the workers are forked


def make(tmp_path):
    """Fails in a worker, or in a run of one process; in the first process of two, a
    slow store that works."""
    if os.getpid() != PARENT or os.environ.get("ONE_PROCESS"):
        time.sleep(0.3)
        raise OSError("the disk is gone")
    time.sleep(0.5)
    return SQLiteStore(tmp_path / "sessions.db")
'''


def test_a_factory_that_fails_stops_every_process(tmp_path: Path) -> None:
    """As one process stops at the factory's first failure, so do two: when the
    worker's factory fails, the first process runs no clause after the one it had in
    flight (not the races it would run alone at the end), every other clause not
    reached."""
    (tmp_path / "failing.py").write_text(FAILING)
    runs = {}
    for jobs in ("1", "2"):
        env = _env(tmp_path, **({"ONE_PROCESS": "1"} if jobs == "1" else {}))
        done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "failing.py:make", "-q", "--jobs",
                               jobs, "--report", f"{jobs}.json"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        runs[jobs] = json.loads((tmp_path / f"{jobs}.json").read_text())["runs"][0]
    one, two = runs["1"], runs["2"]
    assert [r["outcome"] for r in one["results"]] == ["error"]
    # What the first process knows the store not to claim is said as such; of the rest,
    # the error and the one clause in flight beside it.
    claimed = [r for r in two["results"] if r["outcome"] != "not claimed"]
    assert len(claimed) <= 2, claimed
    assert [r["outcome"] for r in claimed].count("error") == 1, claimed
    assert "the disk is gone" in two["stopped"]
    for run in (one, two):
        assert run["totals"]["not reached"] + len(run["results"]) == 105, run["totals"]


WORKER_RAISES = '''
import os, sys
from storetest import runner

PARENT = os.getpid()
run = runner._run
calls = [0]


def raising(c, *args, **kwargs):
    # storetest's own code failing in a worker, outside any clause's verdict.
    calls[0] += 1
    if os.getpid() != PARENT and calls[0] == 2:
        raise RuntimeError("the harness broke")
    return run(c, *args, **kwargs)


runner._run = raising
from storetest import cli
sys.exit(cli.main(["check", "-q", "--jobs", "2", "--seed", "6", "--report", "report.json"]))
'''


def test_what_a_worker_raised_names_its_clause(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", WORKER_RAISES], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    run = json.loads((tmp_path / "report.json").read_text())["runs"][0]
    errors = [r for r in run["results"] if r["outcome"] == "error"]
    assert len(errors) == 1, errors
    assert ("exited with status 1 before its verdict; it raised RuntimeError: the harness broke"
            in errors[0]["diagnosis"]), errors
    assert run["totals"]["clauses"] == len(run["results"]) == 105
