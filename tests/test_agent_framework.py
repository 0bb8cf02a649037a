"""The Microsoft Agent Framework bindings (history_providers, session_stores): what
docs/agent-framework.md says of them, point by point, and the page's lines run."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra is in 'all'")

from agent_framework import Content, FileHistoryProvider, FileSessionStore, InMemoryHistoryProvider, Message

from storetest import check, history_providers, session_stores
from storetest.bindings._agent_framework_messages import agent_framework, messages_protocol, to_item, to_message
from storetest.bindings.agent_framework import NOT_IN_THE_PROTOCOL
from storetest.items import same_value
from tests.broken_stores.agent_framework_sessions_variants import memory_sessions
from tests.pages import run_conformance_lines

ROOT = Path(__file__).resolve().parent.parent


def test_without_the_framework_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agent_framework", None)
    with pytest.raises(ImportError, match=r"storetest\[agent-framework\]"):
        agent_framework()


def test_every_content_kind_of_the_framework_is_in_the_corpus_and_each_item_is_its_message() -> None:
    made = {name.removeprefix("from_") for name in dir(Content)
            if name.startswith("from_") and name not in ("from_dict", "from_json")}
    kinds: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("type"), str):
                kinds.add(value["type"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    corpus = messages_protocol().corpus
    walk(list(corpus))
    kinds |= {"text"} if any("content" in i for i in corpus) else set()
    # from_data and from_uri both make "data"/"uri" contents; the others are named after their type.
    wanted = {"data" if k == "data" else k for k in made}
    assert wanted <= kinds, f"content kinds missing from the corpus: {sorted(wanted - kinds)}"
    for item in corpus:
        assert same_value(to_item(to_message(item)), item), item


def test_a_factory_returning_no_provider_is_told_what_to_return() -> None:
    report = check(history_providers(lambda: object()), clauses=["items_keep_their_order"], seed=1)
    (result,) = report.results
    assert result.outcome == "error" and "get_messages, save_messages" in result.diagnosis, result.diagnosis
    with pytest.raises(TypeError, match="outer factory"):
        history_providers(3)  # type: ignore[arg-type]


def test_pop_limit_and_clear_clauses_are_skipped_as_not_in_the_protocol() -> None:
    report = check(history_providers(lambda: InMemoryHistoryProvider()), clauses=list(NOT_IN_THE_PROTOCOL), seed=1)
    assert {r.clause: r.outcome for r in report.results} == dict.fromkeys(NOT_IN_THE_PROTOCOL, "skipped")
    assert all("not in Agent Framework's protocol" in r.diagnosis for r in report.results)


class _Closing(InMemoryHistoryProvider):
    events: ClassVar[list[str]] = []

    def __init__(self) -> None:
        super().__init__()
        self.events.append("opened")

    async def aclose(self) -> None:
        self.events.append("closed")


def test_state_is_one_dict_per_provider_and_session_and_the_provider_is_closed() -> None:
    shared = InMemoryHistoryProvider()
    report = check(history_providers(lambda: shared), clauses=["item_replicas_see_each_others_writes"], seed=1)
    assert report.ok, str(report)  # both handles on one provider object share its sessions' state
    report = check(history_providers(lambda: InMemoryHistoryProvider()),
                   clauses=["item_replicas_see_each_others_writes"], seed=1)
    assert not report.ok  # two provider objects: two states, as two AgentSessions would hold
    _Closing.events.clear()
    check(history_providers(lambda: _Closing()), clauses=["items_keep_their_order"], seed=1)
    assert _Closing.events and _Closing.events.count("opened") == _Closing.events.count("closed"), _Closing.events


def test_the_session_store_binding_judges_delete_and_refused_ids_are_a_limit(tmp_path: Path) -> None:
    report = check(session_stores(memory_sessions), clauses=[
        "delete_removes_the_session", "delete_racing_save_leaves_gone_or_whole", "bad_input_is_rejected"], seed=1)
    assert {r.clause: r.outcome for r in report.results} == {
        "delete_removes_the_session": "passed", "delete_racing_save_leaves_gone_or_whole": "passed",
        "bad_input_is_rejected": "skipped"}, str(report)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FileSessionStore is marked experimental
        report = check(session_stores(lambda tmp_path: FileSessionStore(tmp_path)),
                       clauses=["delete_removes_the_session"], seed=1)
    (result,) = report.results
    assert result.outcome == "passed" and any("refused (ValueError)" in x for x in result.limits), result


def test_the_lines_are_the_pages_and_they_run(monkeypatch: pytest.MonkeyPatch) -> None:
    source = " ".join(Path(__file__).read_text(encoding="utf-8").split())
    lines = run_conformance_lines("agent-framework.md")
    assert len(lines) == 2
    for line in lines:
        assert line in source, line
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both are marked experimental
        for binding in (history_providers(lambda tmp_path: FileHistoryProvider(tmp_path / "history")),
                        session_stores(lambda tmp_path: FileSessionStore(tmp_path / "sessions"))):
            report = check(binding, clauses=["items_keep_their_order", "save_replaces_the_transcript"], seed=1)
            assert report.count("passed") == 1, str(report)


def test_the_correct_provider_is_under_40_lines_and_passes_storetest_check() -> None:
    from tests import history_providers as module

    assert len(inspect.getsource(module).splitlines()) < 40
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "storetest.cli", "check", "tests.history_providers:sqlite_history",
         "-k", "items_round_trip_exactly,items_keep_their_order", "-q"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 0 failed" in done.stdout, done.stdout


def test_a_repeated_message_is_still_two_messages_for_the_items() -> None:
    # The items of two equal messages are equal; the clauses count them as two (the
    # framework's providers dropping the second is theirs: docs/ecosystem.md).
    one, two = Message("assistant", ["OK"]), Message("assistant", ["OK"])
    assert to_item(one) == to_item(two) == {"role": "assistant", "content": "OK"}
