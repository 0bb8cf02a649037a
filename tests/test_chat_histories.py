"""The LangChain chat-history binding (storetest/chat_history_binding.py,
storetest/chat_messages.py): the one line passes a correct history through ``storetest
check`` (through pytest, sync and async: tests/test_conformance_chat_histories.py);
LangChain's messages round-trip through the item form; what the protocol lacks is
skipped, what it does not promise is labelled, ids the store has not or maps are said so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is in 'all'")

from langchain_core.messages import HumanMessage, message_to_dict, messages_from_dict

from storetest import chat_histories, check
from storetest.bindings._langchain_messages import chat_protocol, to_item, to_message
from storetest.bindings.langchain import NO_SESSION_IDS
from storetest.items import same_value
from tests.broken_stores.chat_variants import MemoryChatHistory, SharedList, memory_chat
from tests.pages import run_conformance_lines

ROOT = Path(__file__).resolve().parent.parent

def test_storetest_check_passes_the_correct_history() -> None:
    """The command on the module's binding: exit 0, every claimed clause passed (the
    cross-process clause too: the outer factory is importable)."""
    done = subprocess.run([str(Path(sys.executable).parent / "storetest"), "check", "tests.chat_histories:sqlite_chat",
                           "--seed", "1", "-k", "not adds_from_processes"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 failed" in done.stdout, done.stdout


def test_the_docs_line_drives_sql_chat_message_history() -> None:
    """docs/langchain.md's line, as it is there (test_the_line_is_the_pages checks it):
    two handles on one SQLite file, fresh files for the first-calls clause, everything closed without error."""
    from functools import partial

    from langchain_community.chat_message_histories import SQLChatMessageHistory
    from sqlalchemy import create_engine

    from storetest import owned

    line = chat_histories(lambda tmp_path: partial(SQLChatMessageHistory,
        connection=owned(create_engine(f"sqlite:///{tmp_path}/chat.db"))))
    clauses = ["items_round_trip_exactly", "item_replicas_see_each_others_writes",
               "first_calls_on_a_fresh_backend_succeed"]
    report = check(line, clauses=clauses, seed=1)
    assert report.capabilities == ("items",)
    outcomes = {r.clause: r.outcome for r in report.results}
    assert outcomes == dict.fromkeys(clauses[:2], "passed") | {clauses[2]: outcomes[clauses[2]]}, str(report)
    # Its constructors racing on a fresh file: create_all checks for the table, then creates it
    # (tests/ecosystem/repros/langchain/sql_sqlite_create_table_race.py); caught on some seeds, not every one.
    fresh = report.results[-1]
    assert fresh.outcome == "passed" or "table message_store already exists" in fresh.details, str(report)


def test_every_corpus_message_survives_langchains_own_serialization() -> None:
    """What the round-trip clause sends is what message_to_dict / messages_from_dict keep:
    the item form maps to a message and back unchanged, through JSON too."""
    import json

    values = chat_protocol()
    for item in (*values.corpus, *values.nul):
        message = to_message(item)
        back = messages_from_dict([json.loads(json.dumps(message_to_dict(message)))])[0]
        assert same_value(item, to_item(back)), item
    kinds = {to_message(i).type for i in values.corpus}
    assert {"human", "ai", "tool", "system", "chat"} <= kinds
    raw = [i for i in values.corpus if "tool_calls" in str(i) and "additional_kwargs" in str(i)]
    assert raw, "no raw tool-call arguments in additional_kwargs"


def test_a_plain_message_is_the_plain_item_and_anything_more_is_not() -> None:
    assert to_item(HumanMessage("hi")) == {"role": "user", "content": "hi"}
    assert to_item(HumanMessage("hi", id="m1"))["type"] == "human"
    assert to_item("not a message") == "not a message"  # type: ignore[comparison-overlap]


def test_what_the_protocol_lacks_is_skipped_and_ids_it_has_not_are_not_applicable(tmp_path: Path) -> None:
    report = check(chat_histories(memory_chat, session_ids=False), seed=3,
                   clauses=["pop_item_takes_the_newest", "get_items_gives_the_latest", "item_sessions_are_isolated",
                            "items_keep_their_order"])
    got = {r.clause: (r.outcome, r.diagnosis) for r in report.results}
    assert got["pop_item_takes_the_newest"] == ("skipped", "not in LangChain's protocol: BaseChatMessageHistory "
                                                           "has no pop")
    assert got["get_items_gives_the_latest"][0] == "skipped"
    assert got["item_sessions_are_isolated"] == ("skipped", NO_SESSION_IDS)
    assert got["items_keep_their_order"][0] == "passed"


def test_an_opener_that_maps_ids_is_a_limit_of_the_isolation_clause() -> None:
    mapped = "session ids are UUIDs only: the opener maps each id"
    report = check(chat_histories(memory_chat, session_ids=mapped), seed=3, clauses=["item_sessions_are_isolated"])
    (result,) = report.results
    assert result.outcome == "passed" and mapped in result.limits, result


def test_a_failure_beyond_the_protocol_says_so() -> None:
    """A history sharing its list fails the aliasing clause, and its verdict begins with
    the label, naming what LangChain documents instead."""
    def shared(tmp_path: Path) -> Any:
        return lambda session_id: SharedList(tmp_path, session_id)

    report = check(chat_histories(shared), seed=3, clauses=["items_are_not_aliased"])
    (result,) = report.results
    assert result.outcome == "failed"
    assert result.diagnosis.startswith("beyond the protocol's promise: the caller changing"), result.diagnosis
    assert any("does not document" in r for r in result.remarks), result.remarks


def test_the_async_methods_are_the_ones_driven() -> None:
    """With asynchronous=True the binding awaits aget_messages / aadd_messages / aclear:
    a history whose sync methods raise still passes."""
    class AsyncOnly(MemoryChatHistory):
        @property
        def messages(self) -> Any:  # type: ignore[override]
            raise AssertionError("the sync messages was called")

        def add_messages(self, messages: Any) -> None:
            raise AssertionError("the sync add_messages was called")

        async def aget_messages(self) -> Any:
            return MemoryChatHistory.messages.fget(self)  # type: ignore[attr-defined]

        async def aadd_messages(self, messages: Any) -> None:
            MemoryChatHistory.add_messages(self, messages)

        async def aclear(self) -> None:
            MemoryChatHistory.clear(self)

    def opener(tmp_path: Path) -> Any:
        return lambda session_id: AsyncOnly(tmp_path, session_id)

    report = check(chat_histories(opener, asynchronous=True), seed=3,
                   clauses=["items_keep_their_order", "clear_session_empties_it"])
    assert [r.outcome for r in report.results] == ["passed", "passed"], str(report)


def test_an_opener_returning_no_history_is_named() -> None:
    report = check(chat_histories(lambda: lambda session_id: object()), seed=3, clauses=["items_keep_their_order"])
    (result,) = report.results
    # The set-up's error, said once (issue 44), not a failure of the clause.
    assert result.outcome == "error" and result.setup, result
    assert "a LangChain chat history has messages" in result.diagnosis, result


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="outer factory"):
        chat_histories("not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session_ids"):
        chat_histories(memory_chat, session_ids="")


def test_without_langchain_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    with pytest.raises(ImportError, match=r"storetest\[langchain\]"):
        chat_histories(memory_chat)


def test_the_line_is_the_pages() -> None:
    source = " ".join(Path(__file__).read_text(encoding="utf-8").split())
    (line,) = run_conformance_lines("langchain.md")
    assert line in source, line
