"""run_conformance as a store author meets it: collection, factory kinds, skips, errors,
the report, profiles and xdist. Each inner run is a real pytest session (pytester)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from storetest.clauses import CLAUSES
from tests.capabilities import OTHER_PROTOCOLS

pytest_plugins = ["pytester"]

CLAUSE_NAMES = [c.name for c in CLAUSES]
#: The clauses a transcript-and-steers store claims (the log clauses need an entry log).
STORE_CLAUSES = [c.name for c in CLAUSES if not c.needs & OTHER_PROTOCOLS]
UNCLAIMED = len([c for c in CLAUSES if "log" in c.needs])
LLAMA = {"llama_index", "llama_index_db"}
ITEMS = len([c for c in CLAUSES if "items" in c.needs and not c.needs & LLAMA])
LLAMA_CHAT = len([c for c in CLAUSES if "llama_index" in c.needs and "llama_index_db" not in c.needs])
LLAMA_DB = len([c for c in CLAUSES if "llama_index_db" in c.needs])
ADK = len([c for c in CLAUSES if "adk" in c.needs])
CHECKPOINTS = len([c for c in CLAUSES if "checkpoints" in c.needs])
# Opt-in clauses, skipped without --storetest-idle or reopen= (the memory store claims these).
IDLE = sum(c.idle or (c.reopen and not c.needs & OTHER_PROTOCOLS) for c in CLAUSES)
DELETES = len([c for c in CLAUSES if "deletes" in c.needs])
QUICK = "-k", "round_trips_exactly or in_order_exactly_once or unknown_session"


def test_one_line_module_gives_one_test_per_clause(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore)
        """
    )
    result = pytester.runpytest("--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    # MemoryStore keeps no entry log: the log clauses are no tests at all.
    assert ids == [
        f"test_one_line_module_gives_one_test_per_clause.py::TestConformance_MemoryStore::test_{n}"
        for n in STORE_CLAUSES
    ]


@pytest.mark.parametrize(
    ("factory", "teardowns"),
    [
        ("def factory():\n    return MemoryStore()", 0),
        ("async def factory():\n    return MemoryStore()", 0),
        ("def factory(teardowns):\n    yield MemoryStore()\n    teardowns.append('sync')", 3),
        ("async def factory(teardowns):\n    yield MemoryStore()\n    teardowns.append('async')", 3),
        ("def factory(tmp_path):\n    with SQLiteStore(tmp_path / 'db') as store:\n        yield store", 0),
        ("factory = lambda: MemoryStore()", 0),
    ],
    ids=["plain", "async", "generator", "async-generator", "fixture-parameter", "lambda"],
)
def test_every_kind_of_factory_works(pytester: pytest.Pytester, factory: str, teardowns: int) -> None:
    """Each kind of factory runs, and a generator factory is torn down once per clause."""
    pytester.makepyfile(
        f"""
        import pytest
        from reference_stores.memory import MemoryStore
        from reference_stores.sqlite import SQLiteStore
        from storetest import run_conformance

        TEARDOWNS = []

        @pytest.fixture
        def teardowns():
            return TEARDOWNS

        {factory.replace(chr(10), chr(10) + ' ' * 8)}

        run_conformance(factory, name="kind")

        def test_zz_teardowns_ran():
            assert len(TEARDOWNS) == {teardowns}
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "-k", QUICK[1] + " or teardowns_ran")
    result.assert_outcomes(passed=4)


def test_an_assigned_class_is_collected_once_under_its_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        TestMemory = run_conformance(MemoryStore)
        """
    )
    result = pytester.runpytest("--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert len(ids) == len(STORE_CLAUSES)
    assert all("::TestMemory::" in i for i in ids)


def test_replica_clauses_skip_with_a_reason_that_says_how_to_enable_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore, name="solo")
        """
    )
    result = pytester.runpytest("-rs", "-k", "replicas_share or once_across_replicas")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*pass replica=<factory> to run_conformance*"])


def test_skip_runs_nothing_and_reports_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore, skip={"large_values_round_trip": "our backend caps rows at 1 KiB"})
        """
    )
    result = pytester.runpytest("-k", "large_values")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*skip*large_values_round_trip*", "*our backend caps rows at 1 KiB*"])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("run_conformance(MemoryStore())", "*must be a callable that returns a store*"),
        ("run_conformance(MemoryStore, skip={'no_such_clause': 'x'})", "*unknown clauses*no_such_clause*"),
    ],
)
def test_a_misconfigured_call_says_how_to_fix_it(
    pytester: pytest.Pytester, call: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        {call}
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    result.stdout.fnmatch_lines([message])


def test_a_factory_that_returns_no_store_is_named_as_such(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from storetest import run_conformance
        run_conformance(lambda: {"not": "a store"}, name="dict")
        """
    )
    result = pytester.runpytest("-k", "unknown_session")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the factory returned {'not': 'a store'}, which has none of the methods of a store*"])


BROKEN = """
from reference_stores.memory import MemoryStore
from storetest import run_conformance

class Lifo(MemoryStore):
    async def take_steers(self, session):
        return (await super().take_steers(session))[::-1]

run_conformance(Lifo, replica=lambda primary: Lifo(primary.backend), name="lifo")
"""


def test_a_failure_shows_the_diagnosis_in_the_table_and_how_to_reproduce(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(BROKEN)
    report = pytester.path / "report.json"
    result = pytester.runpytest("-k", "in_order_exactly_once", f"--storetest-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*storetest conformance (profile fast)*",
        f"lifo: 1 of {len(CLAUSE_NAMES)} clauses selected ({len(CLAUSE_NAMES) - 1} deselected): 0 passed, 1 failed (*",
        "*FAIL*steers_are_taken_in_order_exactly_once*",
        "*steers returned last-in-first-out*",
    ])
    result.stdout.fnmatch_lines(["*--storetest-seed=*--storetest-nonce=*--storetest-profile=fast*"])
    data = json.loads(report.read_text())
    (row,) = [r for r in data["runs"][0]["results"] if r["outcome"] != "not claimed"]
    assert row["outcome"] == "failed"
    assert "last-in-first-out" in row["diagnosis"]


def test_markdown_report_has_a_row_per_clause(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore, name="memory")
        """
    )
    report = pytester.path / "report.md"
    pytester.runpytest(f"--storetest-report={report}").assert_outcomes(passed=len(STORE_CLAUSES) - 2 - IDLE,
                                                                             skipped=2 + IDLE)
    text = report.read_text()
    assert "## memory" in text
    for name in STORE_CLAUSES:
        assert f"| [`{name}`](#clause-{name}) |" in text
    assert (f"not claimed: entry log ({UNCLAIMED} clauses), item history ({ITEMS}), ADK session service ({ADK}), "
            f"LangGraph checkpointer ({CHECKPOINTS}), session delete ({DELETES}), "
            f"LlamaIndex chat store ({LLAMA_CHAT}), LlamaIndex AsyncDBChatStore ({LLAMA_DB}).") in text


def test_profiles_are_chosen_by_flag_or_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(BROKEN)
    result = pytester.runpytest("--storetest-profile=nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    monkeypatch.setenv("STORETEST_PROFILE", "ci")
    result = pytester.runpytest("-k", "in_order")
    result.stdout.fnmatch_lines(["*storetest conformance (profile ci)*"])


def test_the_suite_runs_under_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance
        run_conformance(MemoryStore, replica=lambda primary: primary.replica(), name="memory")
        """
    )
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess("-n", "2", f"--storetest-report={report}")
    result.assert_outcomes(passed=len(STORE_CLAUSES) - IDLE, skipped=IDLE)
    # The controller gathers the workers' results into one table, in clause order.
    result.stdout.fnmatch_lines([f"memory: {len(CLAUSE_NAMES)} clauses: {len(STORE_CLAUSES) - IDLE} passed*"])
    rows = json.loads(report.read_text())["runs"][0]["results"]
    assert [r["clause"] for r in rows] == CLAUSE_NAMES


def test_a_factory_that_raises_fails_once_and_the_rest_are_not_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from storetest import run_conformance

        def broken_factory():
            raise RuntimeError("cannot reach the database")

        run_conformance(broken_factory)
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=1, skipped=len(CLAUSE_NAMES) - 1)
    result.stdout.fnmatch_lines([
        "*the factory raised RuntimeError: cannot reach the database while making the store*",
        f"*{len(CLAUSE_NAMES)} clauses: 0 passed, 0 failed, 1 error, {len(CLAUSE_NAMES) - 1} not reached*",
    ])


def test_a_fixture_that_fails_is_reported_in_its_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance

        @pytest.fixture
        def database():
            raise RuntimeError("no database")

        def factory(database):
            return MemoryStore()

        run_conformance(factory, name="my-run")
        """
    )
    result = pytester.runpytest("-k", "unknown_session")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"my-run: 1 of {len(CLAUSE_NAMES)} clauses selected ({len(CLAUSE_NAMES) - 1} "
                                 "deselected): 0 passed, 0 failed, 1 error*",
                                 "*no database*"])


def test_the_replay_line_works_from_any_directory(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Issue 44: the line named the test by its id, relative to the rootdir."""
    import shlex
    import subprocess
    import sys

    pytester.makepyfile(BROKEN)
    result = pytester.runpytest("-k", "in_order_exactly_once")
    result.assert_outcomes(failed=1)
    # One line, though it may be printed twice: with CI set, pytest's short summary repeats a
    # failure's whole message.
    (line,) = {ln.split("replay: ", 1)[1] for ln in result.stdout.lines if ln.startswith("replay: pytest ")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    again = subprocess.run([sys.executable, "-m", *shlex.split(line), "-p", "no:cacheprovider"], cwd=elsewhere,
                           capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "steers returned last-in-first-out" in again.stdout, again.stdout
