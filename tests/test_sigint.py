"""Ctrl-C as a user sends it (issue 27): SIGINT to the process group of a real
``storetest check`` and of a real pytest run, at 20 points of each run.

Every run is a subprocess in its own process group with the default SIGINT handler.
The points are chosen, not timed: the store (``STORES`` below) writes a marker file
when the k-th store of the run is opened, in flight in a call, made by its factory or
torn down, and the test sends SIGINT once the marker is there. Each run must exit 130,
blame nothing on the store (no ``error``, no ``failed``), stop (no store made after the
interrupted one), run the teardown of every store it made, and write its report with
"interrupted after N of M claimed clauses".

Cost: 41 short runs (5 quick clauses each), 4 at a time; about 40 s on 2 busy cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storetest.cli import _selected

ROOT = Path(__file__).resolve().parent.parent

STORES = '''
import asyncio, os, time
from pathlib import Path

from reference_stores.memory import MemoryStore

MARK, LOG = Path(os.environ["STOP_MARK"]), Path(os.environ["STOP_LOG"])
SENT = Path(os.environ["STOP_MARK"] + ".sent")
AT, MODE = int(os.environ["STOP_AT"]), os.environ["STOP_MODE"]
HOLD = float(os.environ.get("STOP_HOLD", "1.5"))
made = [0]


def log(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")


def mark():
    if not MARK.exists():
        MARK.write_text(MODE)
        return True
    return False


def at_point(store):
    """Whether this call is to block (``call``): the k-th store's first call. In
    ``running`` the clause runs on, but every call of that store from then on takes
    50 ms, and until the test has sent the interrupt (``SENT``) each waits for it in
    50 ms steps, so the interrupt lands somewhere in the clause, still in flight,
    however late a loaded machine lets the test send it."""
    if store.k != AT or MODE not in ("call", "running"):
        return False
    if mark():
        return MODE == "call"
    if MODE == "running":
        waited = 0
        while True:
            time.sleep(0.05)
            waited += 1
            if SENT.exists() or waited > 600:
                break
    return False


class Async(MemoryStore):
    k = 0

    async def messages(self, session):
        if at_point(self):
            await asyncio.sleep(30)  # cancelled by the interrupt
        return await super().messages(session)

    async def take_steers(self, session):
        if at_point(self):
            await asyncio.sleep(30)
        return await super().take_steers(session)


class Plain:
    k = 0

    def __init__(self):
        self.data, self.steers = {}, {}

    def save(self, session, messages):
        self.data[session] = list(messages)

    def messages(self, session):
        if at_point(self):
            time.sleep(HOLD)  # a thread cannot be cancelled: the run waits for it, then tears down
        return list(self.data.get(session, []))

    def add_steer(self, session, text):
        self.steers.setdefault(session, []).append(text)

    def take_steers(self, session):
        if at_point(self):
            time.sleep(HOLD)
        return self.steers.pop(session, [])


def _made():
    made[0] += 1
    k = made[0]
    log(f"making {k}")
    return k


async def async_store():
    k = _made()
    if k == AT and MODE == "factory":
        mark()
        await asyncio.sleep(30)
    store = Async()
    store.k = k
    log(f"open {k}")
    yield store
    if k == AT and MODE == "teardown":
        mark()
        await asyncio.sleep(HOLD)
    log(f"teardown {k}")


def plain_store():
    k = _made()
    if k == AT and MODE == "factory":
        mark()
        time.sleep(30)
    store = Plain()
    store.k = k
    log(f"open {k}")
    yield store
    if k == AT and MODE == "teardown":
        mark()
        time.sleep(HOLD)
    log(f"teardown {k}")
'''

TEST_FILE = '''
from storetest import run_conformance
from sigstores import async_store, plain_store
import os

run_conformance(async_store if os.environ["STOP_KIND"] == "async" else plain_store, name="sig")
'''

CLAUSES = ["transcript_round_trips_exactly", "tool_arguments_are_kept_verbatim", "save_replaces_the_transcript",
           "unknown_session_is_empty", "steers_are_taken_in_order_exactly_once"]
KEYWORD = " or ".join(CLAUSES)
MODES = ["call", "running", "factory", "teardown"]
#: (k-th store of the run, where it is interrupted, async or plain store): 20 points.
POINTS = [(k, mode, "async" if (k + i) % 2 else "plain") for k in range(1, 6) for i, mode in enumerate(MODES)]


def _command(runner: str, kind: str, tmp: Path) -> list[str]:
    if runner == "check":
        return [sys.executable, "-m", "storetest.cli", "check", f"sigstores:{kind}_store", "-k", KEYWORD,
                "--report", str(tmp / "r.json"), "--report", str(tmp / "r.md")]
    # Only storetest's plugin (PYTEST_DISABLE_PLUGIN_AUTOLOAD below): half the start-up time.
    return [sys.executable, "-m", "pytest", "-p", "storetest.plugin", "-p", "no:cacheprovider",
            "-q", "test_sig.py", "-k", KEYWORD, f"--storetest-report={tmp / 'r.json'}"]


def _start(runner: str, point: tuple[int, str, str], tmp: Path, hold: float = 1.5) -> subprocess.Popen[str]:
    k, mode, kind = point
    tmp.mkdir(parents=True)
    (tmp / "sigstores.py").write_text(STORES)
    (tmp / "test_sig.py").write_text(TEST_FILE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), str(ROOT)]), "STOP_MARK": str(tmp / "mark"),
           "STOP_LOG": str(tmp / "log"), "STOP_AT": str(k), "STOP_MODE": mode, "STOP_KIND": kind,
           "STOP_HOLD": str(hold), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.Popen(
        _command(runner, kind, tmp), cwd=tmp, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        process_group=0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the run ended before its point ({process.returncode}):\n{out}\n{err}")
        assert time.monotonic() < deadline, "the point never came"
        time.sleep(0.01)


def _interrupt_at(runner: str, point: tuple[int, str, str], tmp: Path) -> list[str]:
    """Problems with one interrupted run (none when it behaved)."""
    process = _start(runner, point, tmp / "run")
    tmp = tmp / "run"
    try:
        _wait_for(tmp / "mark", process)
        (tmp / "mark.sent").touch()
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        return [f"{runner} at {point}: still running 60 s after SIGINT"]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    k = point[0]
    problems = []
    if process.returncode != 130:
        problems.append(f"exit {process.returncode}, not 130")
    lines = (tmp / "log").read_text().splitlines()
    if any(int(line.split()[1]) > k for line in lines):
        problems.append(f"the run went on after the interrupt: {lines}")
    opened = {line.split()[1] for line in lines if line.startswith("open")}
    torn = {line.split()[1] for line in lines if line.startswith("teardown")}
    if opened != torn:
        problems.append(f"stores opened {sorted(opened)} but torn down {sorted(torn)}")
    if "store raised" in out or "Traceback" in err:
        problems.append(f"the store was blamed, or a traceback printed:\n{out}\n{err}")
    try:
        (run,) = json.loads((tmp / "r.json").read_text())["runs"]
    except (OSError, ValueError) as exc:
        return [*problems, f"no report: {exc}\n{out}\n{err}"]
    outcomes = [r["outcome"] for r in run["results"]]
    if {"error", "failed"} & set(outcomes) or outcomes.count("interrupted") > 1:
        problems.append(f"outcomes {outcomes}")
    total = len(_selected(KEYWORD) or ())  # pytest -k selects the same clause tests
    done = len([o for o in outcomes if o != "interrupted"])
    if run["interrupted"] != f"interrupted after {done} of {total} claimed clauses" or run["interrupted"] not in out:
        problems.append(f"report says {run['interrupted']!r}; output:\n{out[-2000:]}")
    return [f"{runner} at {point}: {p}" for p in problems]


@pytest.mark.parametrize("runner", ["check", "pytest"])
def test_sigint_at_20_points_stops_the_run_and_blames_nothing_on_the_store(runner: str, tmp_path: Path) -> None:
    began = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda n: _interrupt_at(runner, POINTS[n], tmp_path / str(n)), range(len(POINTS))))
    problems = [p for run in found for p in run]
    took = f"{len(POINTS)} interrupted runs in {time.monotonic() - began:.1f} s"
    assert problems == [], "\n".join([took, *problems])


def test_a_second_ctrl_c_exits_at_once_without_teardown(tmp_path: Path) -> None:
    tmp_path = tmp_path / "run"
    process = _start("check", (2, "teardown", "plain"), tmp_path, hold=30)
    try:
        _wait_for(tmp_path / "mark", process)
        os.killpg(process.pid, signal.SIGINT)
        assert process.stderr is not None
        while "storetest: interrupted:" not in (line := process.stderr.readline()):
            assert line, "the first interrupt was never acknowledged"
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=20)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert "interrupted again: exiting now, without teardown" in err
    assert "teardown 2" not in (tmp_path / "log").read_text()  # it would have taken 30 s
    assert took < 20
