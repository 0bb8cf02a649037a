"""The one line, on the correct Microsoft Agent Framework history provider of
tests/history_providers.py (SQLite, every batch one transaction): every clause a test
of its own, crash consistency through reopen=."""

import pytest

pytest.importorskip("agent_framework", reason="the agent-framework extra is in 'all'")

from storetest import run_conformance
from tests.history_providers import sqlite_history

run_conformance(sqlite_history, name="sqlite-history-provider", reopen=sqlite_history)
