"""The fork server: children of the process clause and the crash clauses are forked
from a process that holds the factory itself, so a lambda, a closure or a factory a
helper built runs them, under pytest and ``check()`` alike, for every binding that has
such clauses (ADK sessions have none: their clauses claim ``adk`` only). Where children
are spawned (``STORETEST_CHILDREN=spawn``, or no fork), the skip says why and how to
fix it, and an importable factory still runs them."""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest

from reference_stores.jsonl_log import JsonlLogStore
from storetest import check, item_sessions
from tests.item_histories import SQLiteItemSession, sqlite_items

pytest_plugins = ["pytester"]

#: Per binding: its imports, a one-line factory written as a lambda, and the clauses of
#: ours that the binding's store claims and that run in child processes.
BINDINGS = {
    "transcripts": ("from reference_stores.sqlite import SQLiteStore",
                    "lambda tmp_path: SQLiteStore(tmp_path / 'db')",
                    {"saves_survive_a_crash", "steers_survive_a_crash"}),
    "item-sessions": ("from storetest import item_sessions\nfrom tests.item_histories import SQLiteItemSession",
                      "item_sessions(lambda tmp_path: lambda sid: SQLiteItemSession(sid, tmp_path / 'items.db'))",
                      {"adds_from_processes_land_whole", "items_survive_a_crash"}),
    "chat-histories": ("from storetest import chat_histories\nfrom tests.chat_histories import SQLiteChatHistory",
                       "chat_histories(lambda tmp_path: lambda sid: SQLiteChatHistory(sid, tmp_path / 'chat.db'))",
                       # items_survive_a_crash pops, which a chat history cannot (it fails so, spawned
                       # with an importable factory too): left to its own issue.
                       {"adds_from_processes_land_whole"}),
    "log-stores": ("from reference_stores.jsonl_log import JsonlLogStore",
                   "lambda tmp_path: JsonlLogStore(tmp_path / 'sessions')",
                   {"log_appends_survive_a_crash"}),
    "checkpointers": ("from storetest import checkpointers\nfrom tests.checkpointers import FileSaver",
                      "checkpointers(lambda tmp_path: FileSaver(tmp_path))",
                      {"put_writes_from_processes_lose_nothing", "checkpoints_survive_a_crash"}),
    "llama-index-chat-stores": (
        "from storetest import llama_index_chat_stores\nfrom tests.llama_index_stores import SQLiteChatStore",
        "llama_index_chat_stores(lambda tmp_path: SQLiteChatStore(path=str(tmp_path / 'chat.db')))",
        {"adds_from_processes_land_whole", "items_survive_a_crash"}),
    "history-providers": (
        "from storetest import history_providers\nfrom tests.history_providers import SQLiteHistoryProvider",
        "history_providers(lambda tmp_path: SQLiteHistoryProvider(tmp_path / 'history.db'))",
        {"adds_from_processes_land_whole", "items_survive_a_crash"}),
}


@pytest.mark.parametrize("binding", list(BINDINGS))
def test_a_lambda_factory_runs_the_process_and_crash_clauses(pytester: pytest.Pytester, binding: str) -> None:
    """The README's one-liner, with a lambda: every clause that runs in child
    processes passes (before the fork server, the process clause was skipped and a
    lambda ``reopen`` refused at collection)."""
    imports, factory, clauses = BINDINGS[binding]
    pytester.makepyfile(f"from storetest import run_conformance\n{imports}\n"
                        f"make = {factory}\nrun_conformance(make, reopen=make, name='one')\n")
    result = pytester.runpytest("-p", "no:randomly", "-rs", "-k", " or ".join(sorted(clauses)))
    result.assert_outcomes(passed=len(clauses))


def _factory_built_by_a_helper(directory_name: str) -> Any:
    """Returns a closure: nothing a child could import by name."""
    return item_sessions(lambda tmp_path: lambda sid: SQLiteItemSession(sid, tmp_path / directory_name))


def test_check_runs_a_closure_in_child_processes() -> None:
    made = _factory_built_by_a_helper("items.db")
    report = check(made, clauses=["adds_from_processes_land_whole", "items_survive_a_crash"], reopen=made, seed=1)
    assert {r.clause: r.outcome for r in report.results} == dict.fromkeys(
        ["adds_from_processes_land_whole", "items_survive_a_crash"], "passed"), report.results


def test_spawned_a_lambda_is_skipped_saying_why_and_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORETEST_CHILDREN", "spawn")
    (result,) = check(_factory_built_by_a_helper("items.db"), clauses=["adds_from_processes_land_whole"],
                      seed=1).results
    assert result.outcome == "skipped", result
    assert "STORETEST_CHILDREN=spawn is set" in result.diagnosis, result.diagnosis
    assert "top level of an importable module" in result.diagnosis and "unset STORETEST_CHILDREN" in result.diagnosis
    with pytest.raises(TypeError, match="STORETEST_CHILDREN=spawn is set"):
        check(sqlite_items, reopen=lambda tmp_path: JsonlLogStore(tmp_path))


def test_spawned_an_importable_factory_still_runs_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback path, kept: children spawned, the factory imported by name."""
    from tests.test_crash_clauses import jsonl

    monkeypatch.setenv("STORETEST_CHILDREN", "spawn")
    (items,) = check(sqlite_items, clauses=["adds_from_processes_land_whole"], seed=1).results
    (logs,) = check(jsonl, clauses=["log_appends_survive_a_crash"], reopen=jsonl, seed=3).results
    assert (items.outcome, logs.outcome) == ("passed", "passed"), (items, logs)


class _FailsInChildren(SQLiteItemSession):
    parent = os.getpid()

    def __init__(self, session_id: str, path: Path) -> None:
        if os.getpid() != self.parent:
            raise RuntimeError("not in a child")
        super().__init__(session_id, path)


def test_a_connection_open_before_the_fork_is_named_when_a_child_fails() -> None:
    """A child forked from a process with a live connection shares it: when a child
    fails, its error names the connection and the fix."""
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as connection:
        _FailsInChildren.parent = os.getpid()
        made = item_sessions(lambda tmp_path: lambda sid: _FailsInChildren(sid, tmp_path / "items.db"))
        (result,) = check(made, clauses=["adds_from_processes_land_whole"], seed=1).results
        host, port = connection.getpeername()[:2]
        peer = f"{host}:{port}"
    assert result.outcome in ("failed", "error"), result
    text = result.diagnosis + result.details
    assert "not in a child" in text and f"connections open before the run ({peer}" in text, text
    assert "make connections inside the factory" in text, text


def test_storetest_check_runs_a_lambda_reopen(tmp_path: Path) -> None:
    """``storetest check`` forks at check()'s start: a lambda target and reopen work."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    (tmp_path / "stores.py").write_text(textwrap.dedent("""
        from reference_stores.jsonl_log import JsonlLogStore
        nameless = lambda tmp_path: JsonlLogStore(tmp_path / "sessions")
    """))
    ran = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "stores.py:nameless", "--reopen",
                          "stores.py:nameless", "-k", "log_appends_survive"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "pass  log_appends_survive_a_crash" in ran.stdout and "24 kills in" in ran.stdout, ran.stdout


def test_a_fork_server_ends_when_its_parent_dies() -> None:
    """The server closes its copy of the parent's end of their pipe: a parent killed
    outright (no atexit, no daemon clean-up) leaves no server behind."""
    import subprocess
    import sys
    import time

    from storetest._engine.crashing import alive

    code = ("import os\nfrom storetest._engine.crashing import Zygote\n"
            "print(Zygote(None, [os.getcwd], name='t').process.pid, flush=True)\nos._exit(0)\n")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(root)})
    server = int(done.stdout.split()[0])
    deadline = time.monotonic() + 30
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(server)


def test_under_pytest_one_fork_server_serves_every_clause(pytester: pytest.Pytester, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The server forked at the end of collection forks the children of the process
    clause and of the crash clause alike: every child has the same parent, which is not
    this process (no check() forked a server of its own)."""
    parents = tmp_path / "parents"
    monkeypatch.setenv("PARENTS_FILE", str(parents))
    pytester.makepyfile(textwrap.dedent("""
        import os
        from storetest import item_sessions, run_conformance
        from tests.item_histories import SQLiteItemSession

        MAIN = os.getpid()

        class Recorder(SQLiteItemSession):
            def __init__(self, sid, path):
                if os.getpid() != MAIN:
                    with open(os.environ["PARENTS_FILE"], "a") as out:
                        out.write(f"{os.getppid()}\\n")
                super().__init__(sid, path)

        make = item_sessions(lambda tmp_path: lambda sid: Recorder(sid, tmp_path / "items.db"))
        run_conformance(make, reopen=make)
    """))
    result = pytester.runpytest("-p", "no:randomly", "-k", "adds_from_processes or items_survive_a_crash")
    result.assert_outcomes(passed=2)
    seen = parents.read_text().split()
    assert len(seen) >= 5 and len(set(seen)) == 1 and int(seen[0]) != os.getpid(), seen
