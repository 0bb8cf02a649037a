"""The one line, on the correct LangChain chat history of tests/chat_histories.py
(SQLite, every batch one transaction), sync and async: every clause a test of its own."""

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra is in 'all'")

from storetest import run_conformance
from tests.chat_histories import async_sqlite_chat, sqlite_chat

run_conformance(sqlite_chat, name="sqlite-chat")
run_conformance(async_sqlite_chat, name="async-sqlite-chat")
