"""The default check against LangGraph's checkpoint conformance suite, side by side,
and the process clause's time per binding.

    python benchmarks/vs_langgraph.py                # 3 rounds, then the process clauses
    python benchmarks/vs_langgraph.py --rounds 5 --skip-bindings

Part 1, interleaved so both sides see the machine alike (ours, theirs, theirs, ours, ...
alternating who goes first each round): ``python -m storetest.cli check`` (the default
check: the SQLite reference store, the default profile, its clauses shared between two
processes where the machine has two CPUs, as a user runs it) against
``langgraph-checkpoint-conformance``'s ``validate()`` on ``AsyncSqliteSaver`` (every
capability it detects; a database file in the working directory), each as a fresh
Python process in a working directory of its own with an empty ``XDG_CACHE_HOME``.
Round 1 runs in new, empty directories (a first run: no Hypothesis database, no
cache); later rounds reuse them (second runs). Printed: each run's wall time (around the
child process), the ratio ours/theirs per round, the median of the second runs' ratios,
and the load averages before and after.

Part 2: the process clause (``adds_from_processes_land_whole``; a checkpointer's
``put_writes_from_processes_lose_nothing``) and one crash clause, each in a fresh process
through ``check()`` with a factory written as a lambda, for each binding's store that has
them: an item session (``tests.item_histories``, SQLite), the OpenAI Agents SDK's
``SQLiteSession`` and ``RedisSession`` (on a throwaway Redis), a LangChain chat history
(``tests.chat_histories``, SQLite), a LangGraph checkpointer (``tests.checkpointers``'s
``FileSaver``), a LlamaIndex chat store and an Agent Framework history provider (both
SQLite, from ``tests``). ADK session services have no process or crash clause. Printed:
the clause's own seconds (the report's) and its outcome; for the two stores with an
importable factory, the process clause again right
after with children spawned (``STORETEST_CHILDREN=spawn``) and the ratio forked/spawned.

Needs the ``bench`` extra (``langgraph-checkpoint-conformance``, ``openai-agents``).
Numbers from a shared machine are noisy: read them with the load beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

THEIRS = textwrap.dedent("""
    import asyncio
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    @checkpointer_test(name="AsyncSqliteSaver")
    async def saver():
        async with AsyncSqliteSaver.from_conn_string("checkpoints.db") as s:
            yield s

    report = asyncio.run(validate(saver))
    passed = sum(r.tests_passed for r in report.results.values())
    failed = sum(r.tests_failed for r in report.results.values())
    print(f"langgraph conformance: {passed} passed, {failed} failed")
""")

#: Per binding: the imports, a lambda factory (the fork server's case), the crash clause
#: it claims (or ""), and an importable factory for the spawned comparison (or ""); the
#: process clause is ``adds_from_processes_land_whole`` but where ``PROCESS_CLAUSE`` says.
BINDINGS = {
    "item session (SQLite, tests.item_histories)": (
        "from storetest import item_sessions\nfrom tests.item_histories import SQLiteItemSession",
        "item_sessions(lambda tmp_path: lambda sid: SQLiteItemSession(sid, tmp_path / 'items.db'))",
        "items_survive_a_crash", "tests.item_histories:sqlite_items"),
    "OpenAI Agents SQLiteSession": (
        "from functools import partial\nfrom storetest import item_sessions\nfrom agents import SQLiteSession",
        "item_sessions(lambda tmp_path: partial(SQLiteSession, db_path=tmp_path / 'sessions.db'))",
        "items_survive_a_crash", ""),
    "OpenAI Agents RedisSession (throwaway Redis)": (
        "from functools import partial\nimport redis.asyncio as redis\nfrom storetest import item_sessions, owned\n"
        "from agents.extensions.memory import RedisSession",
        "item_sessions(lambda storetest_redis_url, storetest_redis_prefix: partial(RedisSession, "
        "key_prefix=storetest_redis_prefix, redis_client=owned(redis.from_url(storetest_redis_url))))",
        "", ""),
    "LangChain chat history (SQLite, tests.chat_histories)": (
        "from storetest import chat_histories\nfrom tests.chat_histories import SQLiteChatHistory",
        "chat_histories(lambda tmp_path: lambda sid: SQLiteChatHistory(sid, tmp_path / 'chat.db'))",
        "", "tests.chat_histories:sqlite_chat"),
    "LangGraph checkpointer (FileSaver, tests.checkpointers)": (
        "from storetest import checkpointers\nfrom tests.checkpointers import FileSaver",
        "checkpointers(lambda tmp_path: FileSaver(tmp_path))",
        "checkpoints_survive_a_crash", ""),
    "LlamaIndex chat store (SQLite, tests.llama_index_stores)": (
        "from storetest import llama_index_chat_stores\nfrom tests.llama_index_stores import SQLiteChatStore",
        "llama_index_chat_stores(lambda tmp_path: SQLiteChatStore(path=str(tmp_path / 'chat.db')))",
        "items_survive_a_crash", ""),
    "Agent Framework history provider (SQLite, tests.history_providers)": (
        "from storetest import history_providers\nfrom tests.history_providers import SQLiteHistoryProvider",
        "history_providers(lambda tmp_path: SQLiteHistoryProvider(tmp_path / 'history.db'))",
        "items_survive_a_crash", ""),
}
PROCESS_CLAUSE = {"LangGraph checkpointer (FileSaver, tests.checkpointers)": "put_writes_from_processes_lose_nothing"}

CLAUSE_RUN = textwrap.dedent("""
    import json, time
    started = time.perf_counter()
    {imports}
    from storetest import check
    make = {factory}
    clauses = [{process!r}] + ([{crash!r}] if {crash!r} else [])
    report = check(make, clauses=clauses, reopen=make if {crash!r} else None)
    print(json.dumps({{"wall": time.perf_counter() - started,
                      "results": [[r.clause, r.outcome, r.seconds, r.diagnosis[:200]] for r in report.results]}}))
""")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return time.perf_counter() - started, done.returncode, (done.stdout + done.stderr).strip()


def environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETEST_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a second run finds the first's .pyc, as theirs (installed) does
    env["PYTHONPATH"] = str(ROOT)
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def side_by_side(rounds: int) -> None:
    print(f"== the default check vs LangGraph's conformance suite ({rounds} rounds; load before {load()})")
    ours_cmd = [sys.executable, "-m", "storetest.cli", "check"]
    theirs_cmd = [sys.executable, "-c", THEIRS]
    ratios: list[float] = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="vs-langgraph-") as top:
        dirs = {side: Path(top, side) for side in ("ours", "theirs")}
        envs = {}
        for side, d in dirs.items():
            (d / "work").mkdir(parents=True)
            envs[side] = environment(d / "cache")
        for r in range(rounds):
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            seconds: dict[str, float] = {}
            for side in order:
                command = ours_cmd if side == "ours" else theirs_cmd
                wall, code, out = timed(command, dirs[side] / "work", envs[side])
                seconds[side] = wall
                failed += code != 0
                summary = next((line for line in out.splitlines() if "passed" in line), out[-200:])
                print(f"  round {r + 1} ({'first' if r == 0 else 'second'} run) {side:6s} {wall:6.2f} s  "
                      f"exit {code}  {summary.strip()[:110]}")
            if failed:  # a run that failed timed something else: no ratio from this round on
                print(f"  round {r + 1}: no ratio, a side exited non-zero (its output above)")
                continue
            ratio = seconds["ours"] / seconds["theirs"]
            if r:
                ratios.append(ratio)
            print(f"  round {r + 1}: ours/theirs = {ratio:.2f}x   (load {load()})")
    if ratios:
        print(f"  second runs: median ours/theirs = {statistics.median(ratios):.2f}x over {len(ratios)} rounds")
    print(f"  load after: {load()}")
    if failed:
        raise SystemExit(f"{failed} run(s) exited non-zero: no ratio is valid")


def clause_run(imports: str, factory: str, crash: str, spawn: bool,
               process: str = "adds_from_processes_land_whole") -> tuple[dict[str, object] | None, str]:
    with tempfile.TemporaryDirectory(prefix="vs-langgraph-binding-") as d:
        script = CLAUSE_RUN.format(imports=imports, factory=factory, crash=crash, process=process)
        env = environment(Path(d) / "cache")
        if spawn:
            env["STORETEST_CHILDREN"] = "spawn"
        _, code, out = timed([sys.executable, "-c", script], Path(d), env)
    try:
        found: dict[str, object] = json.loads(out.strip().splitlines()[-1])
        return found, ""
    except (ValueError, IndexError):
        return None, f"exit {code}: {out[-300:]}"


def bindings() -> None:
    print(f"== the process clause (and a crash clause) per binding, lambda factories (load before {load()})")
    for name, (imports, factory, crash, importable) in BINDINGS.items():
        found, error = clause_run(imports, factory, crash, spawn=False,
                                  process=PROCESS_CLAUSE.get(name, "adds_from_processes_land_whole"))
        if found is None:
            print(f"  {name}: {error}")
            continue
        forked: dict[str, float] = {}
        for clause, outcome, seconds, diagnosis in found["results"]:  # type: ignore[attr-defined]
            forked[clause] = seconds
            print(f"  {name:52s} {clause:32s} {seconds:5.2f} s  {outcome}"
                  + (f" ({diagnosis})" if outcome != "passed" else ""))
        print(f"  {'':52s} {'(whole process, imports included)':32s} {found['wall']:5.2f} s  (load {load()})")
        if importable:
            # Side by side: the same store, its factory importable, children spawned.
            module, _, attribute = importable.partition(":")
            spawned, error = clause_run(f"from {module} import {attribute}", attribute, "", spawn=True)
            if spawned is None:
                print(f"  {name} spawned: {error}")
                continue
            for clause, outcome, seconds, _ in spawned["results"]:  # type: ignore[attr-defined]
                print(f"  {'  spawned (STORETEST_CHILDREN=spawn)':52s} {clause:32s} {seconds:5.2f} s  {outcome}; "
                      f"forked/spawned = {forked[clause] / seconds:.2f}x  (load {load()})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of part 1 (the first is the first run)")
    parser.add_argument("--skip-bindings", action="store_true", help="part 1 only")
    parser.add_argument("--skip-side-by-side", action="store_true", help="part 2 only")
    args = parser.parse_args()
    if not args.skip_side_by_side:
        side_by_side(args.rounds)
    if not args.skip_bindings:
        bindings()


if __name__ == "__main__":
    main()
