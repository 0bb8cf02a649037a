"""Ctrl-C at any point of ``storetest check``, import included (issue 44): one line on
stderr, no traceback, exit status 130, and every ``--report`` written with what is known.

A real SIGINT to the process group of the real ``storetest`` script, at points chosen,
not timed: a ``sitecustomize`` on the child's path holds the import of a named module
(Hypothesis, which storetest loads, or the target's own module) after
writing a marker file, and the test sends SIGINT once the marker is there; the target's
factory and a store call hold the same way. Before, Ctrl-C while storetest loaded (its
first second) printed a 40-frame traceback and the process died of the signal (-2), and
no report was written.

What is left to Python: the interpreter's start and ``import storetest`` (the standard
library only, about 0.1 s) come before any code of the command runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from storetest.report import schema

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "storetest"

#: Holds the import of $HOLD_IMPORT (once it is asked for) after writing $HOLD_MARK.
SITECUSTOMIZE = '''
import os, sys, time

_MODULE, _MARK = os.environ.get("HOLD_IMPORT"), os.environ.get("HOLD_MARK")


class _Hold:
    def find_spec(self, name, path=None, target=None):
        if name == _MODULE:
            sys.meta_path.remove(self)
            open(_MARK, "w").close()
            time.sleep(60)
        return None


if _MODULE:
    sys.meta_path.insert(0, _Hold())
'''

#: The target: its factory, or its store's first call, holds at $HOLD_AT.
TARGET = '''
import os, time
from reference_stores.memory import MemoryStore


def _hold(point):
    if os.environ.get("HOLD_AT") == point:
        open(os.environ["HOLD_MARK"], "w").close()
        time.sleep(60)


class Held(MemoryStore):
    async def messages(self, session):
        _hold("clause")
        return await super().messages(session)


def make_store():
    _hold("factory")
    return Held()
'''

#: Where the run is held: (HOLD_IMPORT, HOLD_AT).
POINTS = {
    "while storetest imports Hypothesis": ("hypothesis", ""),
    "while the target's module imports": ("heldstore", ""),
    "while the factory makes the store": ("", "factory"),
    "while a clause runs": ("", "clause"),
}


def _interrupted_at(point: str, tmp: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    module, at = POINTS[point]
    (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp / "heldstore.py").write_text(TARGET)
    mark = tmp / "mark"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), str(ROOT)]), "HOLD_IMPORT": module,
           "HOLD_AT": at, "HOLD_MARK": str(mark)}
    command = [str(SCRIPT), "check", "heldstore:make_store", "-k", "transcript_round_trips_exactly",
               "--report", str(tmp / "r.json"), "--report", str(tmp / "r.md")]
    process = subprocess.Popen(command, cwd=tmp, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               process_group=0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():
            assert process.poll() is None, f"ended before its point: {process.communicate()}"
            assert time.monotonic() < deadline, "the point never came"
            time.sleep(0.01)
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, out, err), tmp


@pytest.mark.parametrize("point", list(POINTS))
def test_ctrl_c_at_any_point_exits_130_with_its_reports(point: str, tmp_path: Path) -> None:
    done, tmp = _interrupted_at(point, tmp_path)
    said = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 130, said
    assert "Traceback" not in done.stderr + done.stdout and "KeyboardInterrupt" not in done.stderr, said
    (run,) = json.loads((tmp / "r.json").read_text())["runs"]
    jsonschema.validate({"format": 3, "runs": [run]}, schema())
    markdown = (tmp / "r.md").read_text()
    assert run["target"] == "heldstore:make_store" and "heldstore:make_store" in markdown
    assert run["interrupted"] in markdown and run["interrupted"] in done.stdout + done.stderr
    if POINTS[point][0]:
        # Before any clause: one line, and a report that says so, with no verdict and no seed.
        assert done.stderr.strip().splitlines() == ["storetest check: interrupted (Ctrl-C) before any clause ran"], said
        assert run["interrupted"] == "interrupted (Ctrl-C) before any clause ran" and run["results"] == []
        assert run["nonce"] == "" and "no seed used" in markdown
    else:
        # In the run: the clause in flight is interrupted, never the store's error.
        assert [r["outcome"] for r in run["results"]] == ["interrupted"], run["results"]
        assert run["interrupted"] == "interrupted after 0 of 1 claimed clauses", run["interrupted"]
