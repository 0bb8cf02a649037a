"""`storetest check`, the main command, as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from storetest.clauses import CLAUSES
from tests.capabilities import OTHER_PROTOCOLS

BROKEN_MODULE = '''
from reference_stores.memory import MemoryStore


class StripsTrailingSpace(MemoryStore):
    async def add_steer(self, session, text):
        await super().add_steer(session, text.rstrip() if isinstance(text, str) else text)


def make_store():
    return StripsTrailingSpace()


def make_replica(primary):
    return StripsTrailingSpace(primary.backend)
'''


def check(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", *args],
        capture_output=True, text=True, cwd=cwd, timeout=600,
    )


def test_default_checks_sqlite_and_prints_the_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = check("--report", str(report), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    n = len(CLAUSES)
    # SQLite keeps no log, no items
    claimed = len([c for c in CLAUSES if not c.needs & OTHER_PROTOCOLS])
    # opt-in (--idle, --reopen), skipped without them
    idle = len([c for c in CLAUSES if c.idle or (c.reopen and not c.needs & OTHER_PROTOCOLS)])
    assert (f"SQLiteStore: {n} clauses: {claimed - idle} passed, 0 failed, {idle} skipped; {n - claimed} "
            "not claimed" in result.stdout)
    data = json.loads(report.read_text())
    assert {row["outcome"] for row in data["runs"][0]["results"]} == {"passed", "skipped", "not claimed"}


def test_a_broken_third_party_store_fails_with_its_diagnosis(tmp_path: Path) -> None:
    (tmp_path / "thirdparty.py").write_text(BROKEN_MODULE)
    report = tmp_path / "report.md"
    result = check("thirdparty:make_store", "--replica", "thirdparty:make_replica",
                   "--report", str(report), "-k", "in_order or isolated", cwd=tmp_path)
    assert result.returncode == 1
    assert "FAIL  steers_are_taken_in_order_exactly_once" in result.stdout
    assert "trailing whitespace stripped" in result.stdout
    row = next(line for line in report.read_text().splitlines()
               if line.startswith("| [`steers_are_taken_in_order_exactly_once`]"))
    assert "| FAIL |" in row


def test_a_bad_target_is_explained(tmp_path: Path) -> None:
    result = check("no_such_module:factory", cwd=tmp_path)
    assert result.returncode != 0
    assert "cannot import 'no_such_module'" in result.stderr
    result = check("just_a_module", cwd=tmp_path)
    assert "is not of the form package.module:factory" in result.stderr


def _replay_line(output: str) -> list[str]:
    line = next(line for line in output.splitlines() if line.startswith("replay: "))
    words = shlex.split(line.removeprefix("replay: "))
    assert words[:2] == ["storetest", "check"], line
    return [sys.executable, "-m", "storetest.cli", *words[1:]]


def test_the_printed_replay_command_reproduces_the_failure(tmp_path: Path) -> None:
    (tmp_path / "thirdparty.py").write_text(BROKEN_MODULE)
    first = check("thirdparty:make_store", "--replica", "thirdparty:make_replica", "-k", "in_order",
                  "--report", str(tmp_path / "first.json"), cwd=tmp_path)
    assert first.returncode == 1
    again = subprocess.run([*_replay_line(first.stdout), "--report", str(tmp_path / "again.json")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 1, again.stdout + again.stderr

    def violations(name: str) -> list[dict[str, str]]:
        (row,) = json.loads((tmp_path / name).read_text())["runs"][0]["results"]
        return row["violations"]  # type: ignore[no-any-return]

    assert violations("first.json") == violations("again.json")


FACTORIES = """
def raises():
    raise RuntimeError("cannot reach the database")


def returns_none():
    return None
"""


def test_a_factory_that_raises_is_reported_once(tmp_path: Path) -> None:
    (tmp_path / "factories.py").write_text(FACTORIES)
    result = check("factories:raises", cwd=tmp_path)
    assert result.returncode == 1
    # The diagnosis, the traceback's first line, the table's row: once each.
    assert result.stdout.count("RuntimeError: cannot reach the database") == 3, result.stdout
    assert "the factory raised RuntimeError" in result.stdout
    assert f"{len(CLAUSES) - 1} selected clauses not reached: the set-up fails before them" in result.stdout
    assert "store raised" not in result.stdout
    result = check("factories:returns_none", "-q", cwd=tmp_path)
    assert result.returncode == 1
    assert "the factory returned None, which has none of the methods of a store" in result.stdout
    assert "store raised" not in result.stdout


def test_exit_codes_and_help(tmp_path: Path) -> None:
    (tmp_path / "thirdparty.py").write_text(BROKEN_MODULE)
    assert check("-k", "unknown_session", "-q", cwd=tmp_path).returncode == 0
    assert check("thirdparty:make_store", "-k", "in_order", "-q", cwd=tmp_path).returncode == 1
    assert check("-k", "no_clause_has_this_name", cwd=tmp_path).returncode == 5  # ran nothing, as pytest
    assert check("no_such_module:factory", cwd=tmp_path).returncode == 4
    assert check("--no-such-option", cwd=tmp_path).returncode == 4
    helped = subprocess.run([sys.executable, "-m", "storetest.cli", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "``" not in helped.stdout


def test_reports_carry_everything_a_reader_needs(tmp_path: Path) -> None:
    (tmp_path / "thirdparty.py").write_text(BROKEN_MODULE)
    for suffix in ("md", "json", "html"):
        check("thirdparty:make_store", "--replica", "thirdparty:make_replica", "-k", "in_order,unknown",
              "--seed", "5", "--nonce", "abc123", "--report", str(tmp_path / f"r.{suffix}"), cwd=tmp_path)
    markdown = (tmp_path / "r.md").read_text()
    page = (tmp_path / "r.html").read_text()
    for text in (markdown, page):
        for needed in ("storetest", "hypothesis", "python", "started:", "thirdparty:make_store",
                       "thirdparty:make_replica", "seed", "abc123", f"Deselected ({len(CLAUSES) - 2})",
                       "--seed 5 --nonce abc123 --profile fast -k steers_are_taken_in_order_exactly_once",
                       "sent:", "got:", "Steers come back oldest first", "#clause-"):
            assert needed in text, (needed, text[:2000])
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["format"] >= 2
    (run,) = data["runs"]
    assert data["format"] == 3
    assert run["totals"] == {"passed": 1, "failed": 1, "skipped": 0, "not claimed": 0, "error": 0, "interrupted": 0,
                             "not run": len(CLAUSES) - 2, "clauses": 2, "selected": 2, "not reached": 0,
                             "deselected": len(CLAUSES) - 2}
    failed = next(c for c in run["results"] if c["outcome"] == "failed")
    assert len(failed["violations"]) >= 1 and failed["replay"].startswith("storetest check thirdparty:make_store")
    assert [c["clause"] for c in run["results"]] == [n for n in [c.name for c in CLAUSES]
                                                      if n in {c["clause"] for c in run["results"]}]


def test_the_profile_comes_from_the_environment_too(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "-k", "unknown_session", "-q",
                           "--report", str(report)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "STORETEST_PROFILE": "ci"}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(report.read_text())["runs"][0]["profile"] == "ci"


def test_version() -> None:
    from importlib.metadata import version

    done = subprocess.run([sys.executable, "-m", "storetest.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"storetest {version('storetest')}"


HELPER = "from reference_stores.memory import MemoryStore as Store\n"
BY_PATH = "from helper import Store\n\n\ndef make_store():\n    return Store()\n"


def test_a_target_may_be_a_file(tmp_path: Path) -> None:
    """``path/to/file.py:factory``, ``./file.py:factory`` and ``file.py:factory``, whose
    neighbours import as they would under ``python path/to/file.py``."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text(HELPER)
    (tmp_path / "sub" / "by_path.py").write_text(BY_PATH)
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "here.py").write_text(BY_PATH)
    for target in ("sub/by_path.py:make_store", "./here.py:make_store", "here.py:make_store"):
        done = check(target, "-k", "unknown_session", "-q", cwd=tmp_path)
        assert done.returncode == 0, (target, done.stdout + done.stderr)
        # the store's class names the run
        assert f"MemoryStore: 1 of {len(CLAUSES)} clauses selected ({len(CLAUSES) - 1} deselected): 1 passed" \
            in done.stdout
    missing = check("nowhere.py:make_store", cwd=tmp_path)
    assert missing.returncode == 4 and "no file 'nowhere.py'" in missing.stderr


def test_k_takes_pytests_expressions() -> None:
    from storetest.cli import _selected, _Usage

    names = [c.name for c in CLAUSES]
    assert _selected("not log and (steers or UNKNOWN)") == [
        n for n in names if "log" not in n and ("steers" in n or "unknown" in n)]
    assert _selected("in_order, unknown") == [n for n in names if "in_order" in n or "unknown" in n]
    assert _selected("log and not (model or replica)") == [
        n for n in names if "log" in n and "model" not in n and "replica" not in n]
    assert _selected("nothing_is_called_this") == []
    for bad in ("and steers", "steers or", "(steers", "steers)", "not"):
        with pytest.raises(_Usage):
            _selected(bad)


TRANSCRIPT_ONLY = '''
class Transcripts:
    def __init__(self):
        self.data = {}

    def save(self, session, messages):
        self.data[session] = list(messages)

    def messages(self, session):
        return list(self.data.get(session, []))


def make_store():
    return Transcripts()


def needs_a_connection(connection):
    return Transcripts()
'''


def test_a_selection_that_runs_nothing_exits_5(tmp_path: Path) -> None:
    (tmp_path / "transcripts.py").write_text(TRANSCRIPT_ONLY)
    done = check("transcripts:make_store", "-k", "log and not replica", "-q", cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "claims none of the" in done.stderr
    assert check("transcripts:make_store", "-k", "nothing_is_called_this", cwd=tmp_path).returncode == 5


def test_advice_for_a_parameter_is_advice_the_command_line_can_follow(tmp_path: Path) -> None:
    (tmp_path / "transcripts.py").write_text(TRANSCRIPT_ONLY)
    done = check("transcripts:needs_a_connection", cwd=tmp_path)
    assert done.returncode == 4
    assert "parameter 'connection'" in done.stderr and "give it a default" in done.stderr
    assert "fixtures=" not in done.stderr


FAILING_TARGETS = {
    "raises_at_import.py": "import helper_for_import\n",
    "helper_for_import.py": "raise RuntimeError('no config file')\n",
    "bad_syntax.py": "def make_store(:\n    pass\n",
    "odd_factories.py": (
        "def recurses():\n    return recurses()\n\n\n"
        "def exits():\n    raise SystemExit(7)\n\n\n"
        "def interrupts():\n    raise KeyboardInterrupt\n"
    ),
}


def test_exit_codes_of_targets_and_factories_that_fail(tmp_path: Path) -> None:
    for name, text in FAILING_TARGETS.items():
        (tmp_path / name).write_text(text)
    raised = check("raises_at_import:make_store", "-q", cwd=tmp_path)
    assert raised.returncode == 4, raised.stderr
    assert "RuntimeError: no config file" in raised.stderr and "Traceback" not in raised.stderr
    assert "importlib" not in raised.stderr and "helper_for_import.py:1" in raised.stderr
    syntax = check("bad_syntax.py:make_store", "-q", cwd=tmp_path)
    assert syntax.returncode == 4 and "SyntaxError" in syntax.stderr and "Traceback" not in syntax.stderr
    deep = check("odd_factories:recurses", "-q", "-k", "unknown_session", cwd=tmp_path)
    assert deep.returncode == 1 and "RecursionError" in deep.stdout
    assert "more frames of the same" in deep.stdout and len(deep.stdout.splitlines()) < 40, deep.stdout
    exits = check("odd_factories:exits", "-q", "-k", "unknown_session", cwd=tmp_path)
    assert exits.returncode == 1 and "the factory raised SystemExit: 7 while making the store" in exits.stdout
    # Raised by the factory, not a Ctrl-C: the factory's failure, named as what it is.
    raised_ki = check("odd_factories:interrupts", "-q", "-k", "unknown_session", cwd=tmp_path)
    assert raised_ki.returncode == 1, raised_ki.stdout + raised_ki.stderr
    assert "the factory raised KeyboardInterrupt while making the store" in raised_ki.stdout
    assert "Traceback" not in raised_ki.stdout + raised_ki.stderr
    # 130, Ctrl-C, is tests/test_sigint.py's.


STUCK = """
import time


class Stuck:
    def add_steer(self, session, text):
        pass

    def take_steers(self, session):
        time.sleep(3600)


def make_store():
    return Stuck()
"""


def test_a_call_that_never_returns_fails_its_clause_with_the_call_named(tmp_path: Path) -> None:
    (tmp_path / "stuck.py").write_text(STUCK)
    done = check("stuck:make_store", "-q", "-k", "in_order_exactly_once", "--call-timeout", "0.5", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "take_steers('st-" in done.stdout and "did not return within 0.5 s" in done.stdout
    assert "abandoned" in done.stdout
    assert check("--call-timeout", "0", cwd=tmp_path).returncode == 4


def test_help_lists_every_exit_status() -> None:
    from storetest import cli

    helped = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "--help"], capture_output=True,
                            text=True)
    text = " ".join(helped.stdout.split())
    for status in (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_NO_CLAUSE, cli.EXIT_INTERRUPTED):
        assert f"{status} when" in text or f"{status} for" in text, (status, text)


def test_the_first_command_shows_progress_only_for_clauses_that_run_and_says_what_next(tmp_path: Path) -> None:
    """Issue 44: 46 of the 67 progress lines were ``n/c``, never explained, and nothing
    said how to test one's own store."""
    result = check("-k", "unknown_session or items_round_trip", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    progress = [line for line in result.stdout.splitlines() if line.startswith("  [")]
    assert progress and not [line for line in progress if " n/c " in line], result.stdout
    assert "to test your own: storetest check yourmodule:make_store" in result.stderr, result.stderr
    assert "--report out.md" in result.stderr


EXITING_MODULE = '''
import atexit, os, threading, time
from pathlib import Path
from reference_stores.memory import MemoryStore

HERE = Path(os.environ["EXIT_MARKS"])


class FreedAtTeardown:
    def __del__(self):
        (HERE / "torn down").write_text("")


KEPT = FreedAtTeardown()  # freed only when the interpreter tears its modules down
atexit.register(lambda: (HERE / "exit handler").write_text(""))
if os.environ.get("EXIT_THREAD"):
    threading.Thread(target=lambda: (time.sleep(0.5), (HERE / "thread").write_text(""))).start()


def make_store():
    return MemoryStore()
'''


@pytest.mark.parametrize("thread", [False, True], ids=["no thread", "a thread that is not a daemon"])
def test_the_command_exits_without_tearing_down_the_interpreter(tmp_path: Path, thread: bool) -> None:
    """``storetest check`` ends without freeing every module (some 60 ms a run,
    benchmarks/check_timeline.py --exit); the exit handlers still run, and a thread the
    store left that is not a daemon is waited for, with a normal exit then."""
    (tmp_path / "exiting.py").write_text(EXITING_MODULE)
    env = {**os.environ, "EXIT_MARKS": str(tmp_path), **({"EXIT_THREAD": "1"} if thread else {})}
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "exiting:make_store", "-q", "-k",
                           "unknown_session"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    marks = {p.name for p in tmp_path.iterdir()} & {"exit handler", "torn down", "thread"}
    assert marks == ({"exit handler", "thread", "torn down"} if thread else {"exit handler"})


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a file every write to fails")
def test_output_the_command_cannot_write_fails_the_exit(tmp_path: Path) -> None:
    """A report that cannot be written out (a full disk, a closed pipe) is no success:
    the exit is the normal one, which names the failed write and exits 120."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "-q", "-k", "unknown_session"],
                              stdout=full, stderr=subprocess.PIPE, cwd=tmp_path, env=env, text=True, timeout=300)
    assert done.returncode == 120, done.stderr
    assert "No space left on device" in done.stderr
