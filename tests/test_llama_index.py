"""The LlamaIndex chat-store binding (storetest/bindings/llama_index.py,
_llama_index_messages.py): the one line passes a correct store through ``storetest check``
(through pytest: tests/test_conformance_llama_index.py); ChatMessage blocks of every kind
round-trip through the item form; what the protocol lacks is skipped, what it does not
promise is labelled; a store of the wrong shape is told so."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core", reason="the llama-index extra is in 'all'")

from llama_index.core.llms import ChatMessage

from storetest import check, llama_index_chat_stores, llama_index_db_chat_stores
from storetest._engine.harness import StoreShapeError
from storetest.bindings._llama_index_messages import ROLES, chat_protocol, to_item, to_message
from storetest.items import same_value
from tests import llama_index_stores
from tests.broken_stores.llama_index_variants import SetInSteps, control, control_neighbour

ROOT = Path(__file__).resolve().parent.parent


def test_storetest_check_passes_the_correct_store(capsys: pytest.CaptureFixture[str]) -> None:
    """The command on the module's binding: exit 0. In this process (its code, not a new
    interpreter: importing LlamaIndex is most of a subprocess's time), two clauses; pytest
    runs every clause, tests/test_conformance_llama_index.py."""
    from storetest.cli import main

    code = main(["check", "tests.llama_index_stores:sqlite_chat_store", "--seed", "1", "-k",
                 "delete_message_removes or get_keys"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 passed, 0 failed" in out, out


def test_the_correct_store_is_under_50_lines() -> None:
    lines = inspect.getsource(llama_index_stores.SQLiteChatStore).splitlines()
    assert len(lines) < 50, len(lines)


def test_every_corpus_message_survives_llama_indexs_own_serialization() -> None:
    """The item form maps to a ChatMessage and back unchanged, through model_dump_json too;
    the corpus has every role and every block kind, tool calls in additional_kwargs."""
    values = chat_protocol()
    for item in (*values.corpus, *values.nul):
        message = to_message(item)
        assert same_value(item, to_item(ChatMessage.model_validate_json(message.model_dump_json()))), item
    messages = [to_message(i) for i in values.corpus]
    assert {str(m.role.value) for m in messages} == set(ROLES)
    kinds = {b.block_type for m in messages for b in m.blocks}
    assert {"text", "image", "audio", "document", "video", "thinking", "tool_call"} <= kinds, kinds
    images = [b for m in messages for b in m.blocks if b.block_type == "image"]
    assert any(b.url for b in images) and any(b.image for b in images)
    assert any("tool_calls" in m.additional_kwargs for m in messages)


def test_a_plain_message_is_the_plain_item_and_anything_more_is_not() -> None:
    assert to_item(ChatMessage(role="user", content="hi")) == {"role": "user", "content": "hi"}
    assert "blocks" in to_item(ChatMessage(role="tool", content="hi"))
    assert "blocks" in to_item(ChatMessage(role="user", content="hi", additional_kwargs={"a": 1}))
    assert to_item(b"raw") == b"raw"  # type: ignore[comparison-overlap]


def test_what_the_protocol_lacks_is_skipped_and_what_it_does_not_promise_is_labelled() -> None:
    report = check(llama_index_chat_stores(control, neighbour=control_neighbour), seed=1, clauses=[
        "get_items_gives_the_latest", "a_batch_is_atomic_to_readers", "set_messages_is_atomic_to_readers"])
    got = {r.clause: r for r in report.results}
    assert got["get_items_gives_the_latest"].outcome == "skipped"
    assert got["a_batch_is_atomic_to_readers"].diagnosis.startswith("not in LlamaIndex's protocol")
    assert got["set_messages_is_atomic_to_readers"].outcome == "passed"
    steps = check(llama_index_chat_stores(lambda tmp_path: SetInSteps(path=str(tmp_path / "c.db"))), seed=1,
                  clauses=["set_messages_is_atomic_to_readers"])
    assert steps.results[0].diagnosis.startswith("beyond the protocol's promise: "), steps.results[0].diagnosis


def test_a_store_of_the_wrong_shape_is_told_so() -> None:
    report = check(llama_index_chat_stores(lambda: object()), seed=1, clauses=["items_keep_their_order"])
    assert "has no get_messages" in str(report), str(report)
    report = check(llama_index_db_chat_stores(lambda tmp_path: control(tmp_path)), seed=1,
                   clauses=["items_keep_their_order"])
    assert "has no" in str(report) or "not all async" in str(report), str(report)
    with pytest.raises(TypeError, match="outer factory"):
        llama_index_chat_stores("not callable")  # type: ignore[arg-type]
    assert isinstance(StoreShapeError("x"), TypeError)


def test_the_docs_lines_are_the_pages_and_the_sqlalchemy_one_runs() -> None:
    """docs/llama-index.md's two lines, as they are there; the SQLAlchemyChatStore one run
    on the clauses of its queue (the Redis one runs in the ecosystem table)."""
    from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore
    from sqlalchemy.ext.asyncio import create_async_engine

    from storetest import owned
    from tests.pages import run_conformance_lines

    lines = run_conformance_lines("llama-index.md")
    assert lines == [
        "llama_index_chat_stores(lambda storetest_redis_url: RedisChatStore(redis_url=storetest_redis_url))",
        'llama_index_db_chat_stores(lambda tmp_path: SQLAlchemyChatStore( "chat", async_engine=owned('
        'create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/chat.db"))))'], lines
    line = llama_index_db_chat_stores(lambda tmp_path: SQLAlchemyChatStore(
        "chat", async_engine=owned(create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/chat.db"))))
    clauses = ["count_messages_counts_each_status", "oldest_messages_leave_first"]
    report = check(line, clauses=clauses, seed=1)
    assert {r.clause: r.outcome for r in report.results} == dict.fromkeys(clauses, "passed"), str(report)
