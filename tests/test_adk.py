"""The ADK binding: what it opens and closes, the errors a misuse gets, that importing
storetest imports no ADK, that its races overlap, and how the isolation and stale-append
clauses judge what a service refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.sessions import Session

from storetest import adk_sessions, check
from storetest.bindings.adk import adk, event
from storetest.clauses import CLAUSES
from storetest.clauses.adk import stored_form
from tests.adk_services import MemorySessionService
from tests.overlap import SIX_ROUNDS
from tests.pages import run_conformance_lines

ROOT = Path(__file__).resolve().parent.parent


def test_importing_storetest_and_its_clauses_imports_no_adk() -> None:
    code = "import sys, storetest, storetest.clauses, storetest.bindings.adk; print('google.adk' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


def test_without_adk_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.adk.events", None)
    with pytest.raises(ImportError, match=r"storetest\[adk\]"):
        adk()


def test_misuse_gets_an_error_that_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="outer factory"):
        adk_sessions(3)
    report = check(adk_sessions(lambda: object()), clauses=["adk_events_round_trip_exactly"], seed=1)
    (result,) = report.results
    assert result.outcome == "error" and "an ADK session service" in result.diagnosis, result.diagnosis


def test_the_temp_keys_of_an_event_are_not_part_of_its_stored_form() -> None:
    sent = event("agent", state_delta={"k": 1, "temp:t": 2, "app:a": 3})
    assert stored_form(sent)["actions"]["state_delta"] == {"k": 1, "app:a": 3}
    assert sent.actions.state_delta == {"k": 1, "temp:t": 2, "app:a": 3}


class _Closing(MemorySessionService):
    opened: ClassVar[list[str]] = []
    closed: ClassVar[int] = 0

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        _Closing.opened.append(str(tmp_path))

    async def close(self) -> None:
        _Closing.closed += 1


def test_a_replica_clause_opens_two_services_on_one_backend_and_closes_both() -> None:
    _Closing.opened, _Closing.closed = [], 0
    report = check(adk_sessions(_Closing), clauses=["adk_replicas_see_each_others_appends"], seed=1)
    assert report.ok, str(report)
    assert len(_Closing.opened) == 2 and len(set(_Closing.opened)) == 1 and _Closing.closed == 2


class _Counting(MemorySessionService):
    """Counts, per app, the create_session calls inside the service at once."""

    most: ClassVar[dict[str, int]] = {}
    now: ClassVar[dict[str, int]] = {}

    async def create_session(self, *, app_name: str, **kwargs: Any) -> Any:
        self.now[app_name] = self.now.get(app_name, 0) + 1
        self.most[app_name] = max(self.most.get(app_name, 0), self.now[app_name])
        try:
            return await super().create_session(app_name=app_name, **kwargs)
        finally:
            self.now[app_name] -= 1


ADK_RACES = [c.name for c in CLAUSES if c.races and "adk" in c.needs]


@pytest.mark.parametrize("clause", ADK_RACES)
def test_adk_races_overlap_their_callers(clause: str) -> None:
    """In most rounds of every ADK race, two or more creates were inside the service at once."""
    _Counting.most, _Counting.now = {}, {}
    report = check(adk_sessions(_Counting), clauses=[clause], seed=11, profile=SIX_ROUNDS)
    assert report.results[0].outcome == "passed", report.results[0].details
    rounds = {app: n for app, n in _Counting.most.items() if "race" in app or "fresh" in app}
    assert rounds, f"{clause} ran no rounds"
    overlapped = sum(n >= 2 for n in rounds.values())
    assert overlapped > len(rounds) / 2, f"{clause}: only {overlapped} of {len(rounds)} rounds overlapped"


class _RefusesNul(MemorySessionService):
    """Refuses an id with a NUL before writing anything, as a Postgres key column does."""

    async def create_session(self, *, session_id: Any = None, **kwargs: Any) -> Any:
        if "\x00" in (session_id or ""):
            raise ValueError("invalid byte sequence for encoding UTF8: 0x00")
        return await super().create_session(session_id=session_id, **kwargs)


class _MergesCase(MemorySessionService):
    """Compares session ids case-insensitively (a case-insensitive collation)."""

    async def create_session(self, *, session_id: Any = None, **kwargs: Any) -> Any:
        return await super().create_session(session_id=session_id.lower(), **kwargs)

    async def get_session(self, *, session_id: str, **kwargs: Any) -> Any:
        return await super().get_session(session_id=session_id.lower(), **kwargs)


def test_an_id_refused_cleanly_is_a_limit_and_a_merge_is_a_failure() -> None:
    (result,) = check(adk_sessions(_RefusesNul), clauses=["adk_sessions_are_isolated"], seed=1).results
    assert result.outcome == "passed", result.details
    (limit,) = result.limits
    assert limit.startswith("2 id(s) refused (ValueError") and "\\x00" in limit, limit
    (result,) = check(adk_sessions(_MergesCase), clauses=["adk_sessions_are_isolated"], seed=1).results
    assert result.outcome == "failed" and "ids are merged" in result.diagnosis, result.diagnosis


class _RaisesStale(MemorySessionService):
    """Raises StaleSessionError for an append through a session older than the stored one."""

    async def append_event(self, session: Session, event: Any) -> Any:
        stored = self.sessions[session.app_name, session.user_id, session.id]
        if len(stored.events) != len(session.events):
            raise StaleSessionError("the session was changed since it was read")
        return await super().append_event(session, event)


class _StoresThenRaisesStale(MemorySessionService):
    """Stores the event, then raises StaleSessionError: a retry would store it twice."""

    async def append_event(self, session: Session, event: Any) -> Any:
        stale = len(self.sessions[session.app_name, session.user_id, session.id].events) != len(session.events)
        done = await super().append_event(session, event)
        if stale:
            raise StaleSessionError("the session was changed since it was read")
        return done


def test_a_stale_append_may_raise_or_append_but_never_lose_or_duplicate() -> None:
    clause = ["adk_stale_session_append_loses_nothing"]
    (raises,) = check(adk_sessions(_RaisesStale), clauses=clause, seed=1).results
    assert raises.outcome == "passed" and list(raises.limits) == ["an append on a stale session object raises "
                                                             "StaleSessionError"], raises.details
    (appends,) = check(adk_sessions(MemorySessionService), clauses=clause, seed=1).results
    assert appends.outcome == "passed" and list(appends.limits) == ["an append on a stale session object appends it"]
    (both,) = check(adk_sessions(_StoresThenRaisesStale), clauses=clause, seed=1).results
    assert both.outcome == "failed" and "unexpected or duplicated" in both.diagnosis, both.diagnosis


def test_the_clauses_send_adk_events_with_every_part_and_scope() -> None:
    from storetest.clauses.adk import corpus

    parts = [p for e in corpus("x") if e.content for p in e.content.parts]
    assert any(p.text for p in parts) and any(p.function_call for p in parts)
    assert any(p.function_response for p in parts)
    keys = {k for e in corpus("x") for k in e.actions.state_delta}
    assert {k.split(":")[0] for k in keys if ":" in k} == {"app", "user", "temp"}


def test_the_docs_lines_drive_adks_own_services(request: pytest.FixtureRequest) -> None:
    """docs/adk.md's two lines, as they are there (test_the_lines_are_the_pages checks
    it): each opens ADK's service (two for the replica clause), the clauses run on it,
    and everything closes without error. (What the clauses find in ADK's services is
    docs/ecosystem.md's business.)"""
    from google.adk.sessions import DatabaseSessionService
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    lines = [
        adk_sessions(lambda tmp_path: SqliteSessionService(str(tmp_path / "adk.db"))),
        adk_sessions(lambda storetest_postgres_url: DatabaseSessionService(
            storetest_postgres_url.replace("postgresql://", "postgresql+asyncpg://"))),
    ]
    clauses = ["adk_events_round_trip_exactly", "adk_replicas_see_each_others_appends"]
    for binding in lines:
        report = check(binding, clauses=clauses, seed=1, fixtures=request.getfixturevalue)
        assert report.capabilities == ("adk",)
        assert [r.outcome for r in report.results] == ["passed", "passed"], str(report)


def test_the_lines_are_the_pages() -> None:
    source = " ".join(Path(__file__).read_text(encoding="utf-8").split())
    lines = run_conformance_lines("adk.md")
    assert len(lines) == 2
    for line in lines:
        assert line in source, line
