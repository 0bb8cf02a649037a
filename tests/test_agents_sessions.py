"""docs/openai-agents.md's lines for the OpenAI Agents SDK's own sessions, run through the binding:
each opens, drives and closes the SDK's store on its backend. (What the suite finds in
those stores is not asserted here: these tests are about the binding.)"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the bench extra (openai-agents) is in 'all'")

import redis.asyncio as redis
from agents import SQLiteSession
from agents.extensions.memory import RedisSession, SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine

from storetest import check, item_sessions, owned
from tests.pages import run_conformance_lines

# docs/openai-agents.md's three lines, as they are there (test_the_lines_are_the_pages checks it).
SQLITE = item_sessions(lambda tmp_path: partial(SQLiteSession, db_path=tmp_path / "sessions.db"))
POSTGRES = item_sessions(lambda storetest_postgres_url: partial(SQLAlchemySession, create_tables=True,
    engine=owned(create_async_engine(storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://")))))
REDIS = item_sessions(lambda storetest_redis_url, storetest_redis_prefix: partial(RedisSession,
    key_prefix=storetest_redis_prefix, redis_client=owned(redis.from_url(storetest_redis_url))))

CLAUSES = ["items_keep_their_order", "item_replicas_see_each_others_writes", "first_calls_on_a_fresh_backend_succeed"]


@pytest.mark.parametrize("binding", [SQLITE, POSTGRES, REDIS],
                         ids=["SQLiteSession", "SQLAlchemySession", "RedisSession"])
def test_the_docs_line_drives_the_sdk_store(binding: Any, request: pytest.FixtureRequest) -> None:
    """The line opens the SDK's store (two handles for the replica clause, fresh ones for
    the first-calls clause), the clauses run on it, and everything closes without error."""
    report = check(binding, clauses=CLAUSES, seed=1, fixtures=request.getfixturevalue)
    assert report.capabilities == ("items",)
    outcomes = {r.clause: r.outcome for r in report.results}
    assert set(outcomes) == set(CLAUSES)
    assert "error" not in outcomes.values(), str(report)
    assert "not claimed" not in outcomes.values(), str(report)


def test_the_lines_are_the_pages() -> None:
    source = " ".join(Path(__file__).read_text(encoding="utf-8").split())
    lines = run_conformance_lines("openai-agents.md")
    assert len(lines) == 3
    for line in lines:
        assert line in source, line
