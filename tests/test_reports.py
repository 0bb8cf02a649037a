"""The reports of a failing run, as a store author pastes them: read by a Markdown
renderer from outside the project, validated against the schema storetest ships, and
saying in one line what the store does not claim."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from markdown_it import MarkdownIt

import storetest
from storetest.clauses import CLAUSES
from storetest.report import schema
from storetest.results import ClauseResult, Report

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent

#: A chat-history store (transcripts, no steers, no entry log) that folds session ids
#: to lower case: 'a' and 'A' share one history.
FOLDS_CASE = '''
from storetest import check_messages, check_session_id


class FoldsCase:
    def __init__(self, data=None):
        self.data = {} if data is None else data

    def save(self, session, messages):
        self.data[check_session_id(session).lower()] = list(check_messages(messages))

    def messages(self, session):
        return list(self.data.get(check_session_id(session).lower(), []))


def make_store() -> FoldsCase:
    return FoldsCase()


def make_replica(primary: FoldsCase) -> FoldsCase:
    return FoldsCase(primary.data)
'''

STEERS = [c.name for c in CLAUSES if "steers" in c.needs and "log" not in c.needs]
LOGS = [c.name for c in CLAUSES if "log" in c.needs]
#: Enough to fail with many violations and with a state-machine story, and quick.
SELECTION = "isolated or store_matches_model or unknown_session or replicas_share or steers or log"
#: The item clauses that selection picks (the others are never named).
LLAMA = {"llama_index", "llama_index_db"}
ITEMS = [c.name for c in CLAUSES if "items" in c.needs and not c.needs & LLAMA
         and any(w in c.name for w in SELECTION.split(" or "))]
ADK = [c.name for c in CLAUSES if "adk" in c.needs and any(w in c.name for w in SELECTION.split(" or "))]
CHECKPOINTS = [c.name for c in CLAUSES
               if "checkpoints" in c.needs and any(w in c.name for w in SELECTION.split(" or "))]
DELETES = [c.name for c in CLAUSES if "deletes" in c.needs and any(w in c.name for w in SELECTION.split(" or "))]
NOT_CLAIMED = (f"not claimed: steers ({len(STEERS)} clauses), entry log ({len(LOGS)}), item history ({len(ITEMS)}), "
               f"ADK session service ({len(ADK)}), LangGraph checkpointer ({len(CHECKPOINTS)})"
               + (f", session delete ({len(DELETES)})" if DELETES else ""))
#: Under pytest, which collects no unclaimed clause, the line counts them all, whatever -k selects.
ALL_ITEMS = [c.name for c in CLAUSES if "items" in c.needs and not c.needs & LLAMA]
ALL_LLAMA_CHAT = [c.name for c in CLAUSES if "llama_index" in c.needs and "llama_index_db" not in c.needs]
ALL_LLAMA_DB = [c.name for c in CLAUSES if "llama_index_db" in c.needs]
ALL_ADK = [c.name for c in CLAUSES if "adk" in c.needs]
ALL_CHECKPOINTS = [c.name for c in CLAUSES if "checkpoints" in c.needs]
ALL_DELETES = [c.name for c in CLAUSES if "deletes" in c.needs]
NOT_CLAIMED_ANY_K = (f"not claimed: steers ({len(STEERS)} clauses), entry log ({len(LOGS)}), "
                     f"item history ({len(ALL_ITEMS)}), ADK session service ({len(ALL_ADK)}), "
                     f"LangGraph checkpointer ({len(ALL_CHECKPOINTS)}), session delete ({len(ALL_DELETES)}), "
                     f"LlamaIndex chat store ({len(ALL_LLAMA_CHAT)}), "
                     f"LlamaIndex AsyncDBChatStore ({len(ALL_LLAMA_DB)})")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One failing ``storetest check`` run, its report asked for three times."""
    where = tmp_path_factory.mktemp("failing")
    (where / "folds.py").write_text(FOLDS_CASE)
    done = subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", "folds:make_store", "-k", SELECTION, "--seed", "3",
         "-q", "--report", "r.md", "--report", "r.json", "--report", "r.html"],
        cwd=where, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    return {"stdout": done.stdout, "md": (where / "r.md").read_text(), "html": (where / "r.html").read_text(),
            "json": json.loads((where / "r.json").read_text())}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "href" and value is not None:
                self.hrefs.append(value)
            if name in ("id", "name") and value:
                self.ids.add(value)


def _links(page: str) -> _Links:
    parser = _Links()
    parser.feed(page)
    return parser


def test_several_reports_are_all_written(reports: dict[str, Any]) -> None:
    for suffix in ("md", "json", "html"):
        assert f"report written to r.{suffix}" in reports["stdout"]
    assert reports["md"].startswith("# storetest conformance report")


def test_the_markdown_has_no_dead_link(reports: dict[str, Any]) -> None:
    """Rendered by markdown-it-py (CommonMark and tables), every link stays in the page
    and lands on something in it."""
    page = MarkdownIt("commonmark").enable("table").render(reports["md"])
    links = _links(page)
    assert len(links.hrefs) >= 4, page[:2000]
    for href in links.hrefs:
        assert href.startswith("#") and href[1:] in links.ids, href
    # The promise and the bug behind each clause are there, not on a page elsewhere.
    for clause in ("sessions_are_isolated", "store_matches_model"):
        c = next(c for c in CLAUSES if c.name == clause)
        assert c.exists_for.split("\n")[0][:40] in reports["md"]


def test_the_html_links_only_inside_itself(reports: dict[str, Any]) -> None:
    links = _links(reports["html"])
    assert links.hrefs and all(h.startswith("#") and h[1:] in links.ids for h in links.hrefs)


def test_every_violation_and_the_story_are_in_markdown_and_html(reports: dict[str, Any]) -> None:
    (run,) = reports["json"]["runs"]
    failed = [r for r in run["results"] if r["outcome"] == "failed"]
    assert {r["clause"] for r in failed} >= {"sessions_are_isolated", "store_matches_model"}
    assert max(len(r["violations"]) for r in failed) > 1
    model = next(r for r in failed if r["clause"] == "store_matches_model")
    assert any("state." in line for line in model["story"]), model["story"]
    for text in (reports["md"], reports["html"].replace("&#x27;", "'").replace("&quot;", '"')):
        assert "in the JSON report" not in text
        for r in failed:
            assert f"Violations ({len(r['violations'])})" in text
            for v in r["violations"]:
                assert f"session {v['session']!r}: " in text
        for line in model["story"]:
            assert line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in text or line in text


def test_code_is_code_and_replays_wrap_in_html(reports: dict[str, Any]) -> None:
    page = reports["html"]
    assert "``" not in page
    assert "<code>DELETE ... RETURNING</code>" in page or "<code>" in page.split("<h2>The clauses</h2>")[1]
    assert "white-space:pre-wrap" in page
    prose = [line for line in reports["md"].splitlines() if not line.startswith("```")]
    assert not [line for line in prose if "``" in line]


def test_the_json_validates_against_the_shipped_schema(reports: dict[str, Any]) -> None:
    shipped = schema()
    jsonschema.Draft202012Validator.check_schema(shipped)
    jsonschema.validate(reports["json"], shipped)
    # The schema is strict enough to catch a renamed key.
    broken = json.loads(json.dumps(reports["json"]))
    broken["runs"][0]["clauses"] = broken["runs"][0].pop("results")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, shipped)


def test_json_and_python_use_one_name_for_each_thing(reports: dict[str, Any]) -> None:
    (run,) = reports["json"]["runs"]
    assert {f.name for f in dataclasses.fields(Report)} <= set(run)
    for row in run["results"]:
        assert set(row) == {f.name for f in dataclasses.fields(ClauseResult)} | {"replay"}


def test_unclaimed_clauses_are_one_line_and_the_name_is_the_stores_class(reports: dict[str, Any]) -> None:
    assert f"{NOT_CLAIMED}." in reports["md"]
    assert "| n/c |" not in reports["md"]
    assert NOT_CLAIMED in reports["stdout"]
    assert "## FoldsCase" in reports["md"]


def test_a_replica_skip_says_how_on_the_command_line(reports: dict[str, Any]) -> None:
    (run,) = reports["json"]["runs"]
    skipped = {r["clause"]: r["diagnosis"] for r in run["results"] if r["outcome"] == "skipped"}
    assert set(skipped) == {"replicas_share_transcripts"}  # the log replica clauses are not claimed
    assert "--replica MODULE:FACTORY" in skipped["replicas_share_transcripts"]
    assert "run_conformance" not in skipped["replicas_share_transcripts"]


def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "storetest.cli", "check", "--report", "r.md",
                           "--report", str(tmp_path / "no" / "such" / "r.json")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4
    assert "no/such' does not exist" in done.stderr
    assert "[1/" not in done.stdout and not (tmp_path / "r.md").exists()


def test_under_pytest_unclaimed_clauses_are_no_tests_and_reports_are_several(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(ROOT)
    pytester.makepyfile(folds=FOLDS_CASE)
    pytester.makepyfile(test_folds="""
        from folds import make_replica, make_store
        from storetest import run_conformance
        run_conformance(make_store, replica=make_replica)
    """)
    assert pytester.runpytest("--storetest-report=missing/r.md").ret == pytest.ExitCode.USAGE_ERROR
    # The clauses not claimed are no tests; -k counts those it would have kept (issue 44).
    result = pytester.runpytest("-k", "unknown_session or replicas_share or log_append_order_is_kept",
                                "--storetest-report=r.md", "--storetest-report=r.json")
    result.assert_outcomes(passed=2)
    assert "skipped" not in result.stdout.lines[-1]
    result.stdout.fnmatch_lines([f"*3 of {len(CLAUSES)} clauses selected ({len(CLAUSES) - 3} deselected): 2 passed, "
                                 "0 failed; 1 not claimed*", "*not claimed: entry log (1 clause)"])
    assert "not claimed: entry log (1 clause)." in (pytester.path / "r.md").read_text()
    jsonschema.validate(json.loads((pytester.path / "r.json").read_text()), schema())
    collected = pytester.runpytest("--collect-only", "-q").outlines
    assert not [line for line in collected if any(name in line for name in STEERS + LOGS)]


def test_check_calls_log_replica_clauses_not_claimed_for_a_store_without_a_log() -> None:
    namespace: dict[str, Any] = {}
    exec(FOLDS_CASE, namespace)
    report = storetest.check(namespace["make_store"], clauses=[c.name for c in CLAUSES if c.replica], seed=1)
    outcomes = {r.clause: r.outcome for r in report.results}
    assert {n: o for n, o in outcomes.items() if n in LOGS} == dict.fromkeys(set(LOGS) & set(outcomes),
                                                                             "not claimed")
    assert outcomes["replicas_share_transcripts"] == "skipped"
