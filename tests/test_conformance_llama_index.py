"""The one line, on the correct LlamaIndex chat store of tests/llama_index_stores.py (SQLite,
every call one transaction): every clause a test of its own."""

import pytest

pytest.importorskip("llama_index.core", reason="the llama-index extra is in 'all'")

from storetest import run_conformance
from tests.llama_index_stores import sqlite_chat_store

run_conformance(sqlite_chat_store, name="llama-index-sqlite")
