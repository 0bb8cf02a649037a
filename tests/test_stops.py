"""Runs that stop (issue 27): a deadline on every store and factory call, and Ctrl-C
under check() that never blames the store. In process; the subprocess runs (20 SIGINTs
to ``storetest check`` and to pytest, a second Ctrl-C) are in tests/test_sigint.py.

Each stuck call waits out a deadline of ``DEADLINE`` seconds; the file takes about 10 s.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sqlite3
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import storetest
from reference_stores.memory import MemoryStore
from storetest.results import Interrupted, Progress

DEADLINE = 1.0
SLACK = 1.0  # what the issue allows past the deadline
STEERS = ["steers_are_taken_in_order_exactly_once"]
QUICK = ["unknown_session_is_empty", "save_replaces_the_transcript"]


class PlainStore:
    """A plain store whose take_steers never returns once ``stuck`` is set."""

    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {}
        self.steers: dict[str, list[str]] = {}
        self.stuck_since: list[float] = []
        self.release = threading.Event()

    def save(self, session: str, messages: Any) -> None:
        self.data[session] = list(messages)

    def messages(self, session: str) -> list[Any]:
        return list(self.data.get(session, []))

    def add_steer(self, session: str, text: str) -> None:
        self.steers.setdefault(session, []).append(text)

    def take_steers(self, session: str) -> list[str]:
        self.stuck_since.append(time.monotonic())
        self.release.wait(3600)  # released at the end of the test, so the thread ends
        return []


class AsyncStore(MemoryStore):
    stuck_since: ClassVar[list[float]] = []

    async def take_steers(self, session: str) -> list[str]:
        self.stuck_since.append(time.monotonic())
        await asyncio.Event().wait()
        return []


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT as a terminal's foreground process has it (``default_int_handler``), for a
    test that presses Ctrl-C itself: not what the process inherited (a background job
    of a script starts with SIGINT ignored, and so do its xdist workers); given back."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _judge(report: storetest.Report, since: list[float], ended: float, call: str) -> str:
    (result,) = report.results
    assert result.outcome == "failed", str(report)
    assert result.diagnosis.startswith(f"{call}('st-"), result.diagnosis
    assert f"did not return within {DEADLINE:g} s" in result.diagnosis
    (violation,) = result.violations
    assert violation.session.startswith("st-") and violation.session in result.diagnosis
    assert since and ended - since[0] < DEADLINE + SLACK, f"reported {ended - since[0]:.2f} s after the call began"
    return result.diagnosis


def test_an_async_take_steers_that_never_returns_is_cancelled_and_torn_down() -> None:
    torn: list[str] = []

    async def factory() -> AsyncIterator[AsyncStore]:
        yield AsyncStore()
        torn.append("teardown")

    AsyncStore.stuck_since = []
    report = storetest.check(factory, clauses=STEERS, call_timeout=DEADLINE, seed=1)
    diagnosis = _judge(report, AsyncStore.stuck_since, time.monotonic(), "take_steers")
    assert "it was cancelled" in diagnosis
    assert torn == ["teardown"]


def test_a_plain_take_steers_that_never_returns_is_abandoned_and_its_teardown_skipped() -> None:
    torn: list[str] = []
    store = PlainStore()

    def factory() -> Iterator[PlainStore]:
        yield store
        torn.append("teardown")

    try:
        report = storetest.check(factory, clauses=STEERS, call_timeout=DEADLINE, seed=1)
        diagnosis = _judge(report, store.stuck_since, time.monotonic(), "take_steers")
        assert "abandoned, still running" in diagnosis and "teardown was skipped" in diagnosis
        assert torn == []
        stuck = [t for t in threading.enumerate() if t.name.startswith("storetest") and t.is_alive()]
        assert stuck and all(t.daemon for t in stuck)  # the interpreter may still exit
    finally:
        store.release.set()


class Noting(PlainStore):
    """A plain store that works (take_steers too) and notes the thread of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def save(self, session: str, messages: Any) -> None:
        self.threads.append(threading.current_thread().name)
        super().save(session, messages)

    def messages(self, session: str) -> list[Any]:
        self.threads.append(threading.current_thread().name)
        return super().messages(session)


def test_a_plain_stores_calls_outside_races_run_on_the_clauses_own_thread() -> None:
    store = Noting()
    report = storetest.check(lambda: store, clauses=["save_replaces_the_transcript"], seed=1)
    assert report.ok, str(report)
    # Not handed to a pool thread and back ("storetest-0"), nor run on the caller's thread,
    # which watches the deadline and Ctrl-C.
    assert len(store.threads) > 50 and set(store.threads) == {"storetest-clause"}, set(store.threads)


class SyncOverAsync:
    """A plain store that drives async code with ``asyncio.run()`` in every method, as a
    plain facade over an async driver does: inside a running event loop it would raise."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # racing calls run on threads, each asyncio.run() its own loop
        self.data: dict[str, list[Any]] = {}
        self.steers: dict[str, list[str]] = {}

    async def _save(self, session: str, messages: Any) -> None:
        with self.lock:
            self.data[session] = list(messages)

    async def _take(self, session: str) -> list[str]:
        with self.lock:
            return self.steers.pop(session, [])

    def save(self, session: str, messages: Any) -> None:
        asyncio.run(self._save(session, messages))

    def messages(self, session: str) -> list[Any]:
        return list(asyncio.run(asyncio.sleep(0, self.data.get(session, []))))

    def add_steer(self, session: str, text: str) -> None:
        with self.lock:
            self.steers.setdefault(session, []).append(text)
        asyncio.run(asyncio.sleep(0))

    def take_steers(self, session: str) -> list[str]:
        return asyncio.run(self._take(session))


def test_a_plain_store_may_run_an_event_loop_of_its_own_in_every_call() -> None:
    report = storetest.check(SyncOverAsync, seed=1, clauses=[
        "save_replaces_the_transcript", "steers_are_taken_in_order_exactly_once",
        "steers_are_taken_exactly_once_under_concurrency"])
    assert report.ok, str(report)


@pytest.mark.parametrize("factory", [MemoryStore, SyncOverAsync], ids=["async", "plain"])
def test_hypothesis_clauses_on_new_threads_collect_no_garbage_each(
        factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Hypothesis registers a Random for each new thread that runs a test, and registering
    # runs gc.collect(): ~15 ms a clause, as every clause runs on a thread of its own
    # (an async store's on its event loop's). The run shares one Random (registered once
    # a process, perhaps by an earlier test here), so no clause collects.
    import gc

    collects: list[str] = []
    real = gc.collect

    def counted(*args: Any) -> int:
        collects.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(gc, "collect", counted)
    for seed in (1, 2):
        report = storetest.check(factory, seed=seed, clauses=[
            "transcript_round_trips_exactly", "tool_arguments_are_kept_verbatim", "store_matches_model"])
        assert report.ok, str(report)
    assert len(collects) <= 1, collects


def test_hypothesis_clauses_hash_no_source_for_an_example_database(monkeypatch: pytest.MonkeyPatch) -> None:
    # A run has no example database; keyless, Hypothesis hashed each clause's source
    # (inspect, tokenize) for a database key that nothing reads.
    import hypothesis.core
    import hypothesis.stateful

    hashed: list[object] = []
    real = hypothesis.core.function_digest
    monkeypatch.setattr(hypothesis.core, "function_digest", lambda f: hashed.append(f) or real(f))
    # A state machine's factory is hashed whatever the settings: a partial, not the class,
    # whose source Python finds by parsing the whole module.
    machines: list[object] = []
    monkeypatch.setattr(hypothesis.stateful, "function_digest", lambda f: machines.append(f) or real(f))
    report = storetest.check(MemoryStore, seed=1, clauses=[
        "transcript_round_trips_exactly", "tool_arguments_are_kept_verbatim", "save_replaces_the_transcript",
        "store_matches_model"])
    assert report.ok, str(report)
    # (Hypothesis's own test around a state machine still is: a few ms, out of reach.)
    assert [f for f in hashed if getattr(f, "__module__", "") != "hypothesis.stateful"] == []
    assert len(machines) == 1 and not isinstance(machines[0], type), machines


def test_a_call_on_the_clauses_thread_sees_no_event_loop_running() -> None:
    from storetest._engine import stops

    seen: list[object] = []

    def store_call() -> str:
        seen.append(asyncio._get_running_loop())
        return asyncio.run(asyncio.sleep(0, "ran"))

    async def clause() -> str:
        here = stops.clause_here()
        assert here is not None
        return here.call("save('s') on the factory's store", "s", store_call)

    watch = stops.Watch()
    loop = asyncio.new_event_loop()
    try:
        assert watch.supervise(lambda: loop.run_until_complete(clause())) == "ran"
    finally:
        loop.close()
    assert seen == [None]


class ThreadBound:
    """An async store over a ``sqlite3`` connection, which may be used only on the
    thread that opened it: its factory's."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE t (session TEXT PRIMARY KEY, messages BLOB)")

    async def save(self, session: str, messages: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (session, pickle.dumps(list(messages))))

    async def messages(self, session: str) -> list[Any]:
        row = self.db.execute("SELECT messages FROM t WHERE session = ?", (session,)).fetchone()
        return [] if row is None else list(pickle.loads(row[0]))


def test_an_async_store_is_called_on_the_thread_its_factory_made_it_on() -> None:
    def factory() -> Iterator[ThreadBound]:
        store = ThreadBound()
        yield store
        store.db.close()

    report = storetest.check(factory, clauses=["save_replaces_the_transcript"], seed=1)
    assert report.ok, str(report)


def _on_a_clause_thread(watch: Any, work: Any) -> Any:
    """``await work()`` on a supervised clause's thread, its event loop running."""
    loop = asyncio.new_event_loop()
    try:
        return watch.supervise(lambda: loop.run_until_complete(work()))
    finally:
        loop.close()


def test_a_factory_opened_inside_a_clause_sees_the_clauses_event_loop() -> None:
    from storetest._engine import stops

    watch = stops.Watch(5)

    async def clause() -> bool:
        # A plain factory of a fresh handle (storetest._engine.backends), as a clause opens one.
        return watch.plain("the handle 0", asyncio.get_running_loop) is asyncio.get_running_loop()

    assert _on_a_clause_thread(watch, clause) is True


def test_a_factory_opened_inside_a_clause_is_torn_down_after_ctrl_c() -> None:
    from storetest._engine import harness, stops

    torn: list[str] = []

    def factory() -> Iterator[object]:
        yield object()
        torn.append("teardown")

    watch = stops.Watch(5)

    async def clause() -> None:
        closers: list[Any] = []
        await harness.enter_factory("handle 0", factory, {}, closers)
        watch.interrupted = True  # Ctrl-C came while the clause used the handle
        for _, closer in closers:
            await harness.close_factory(closer)

    with stops.watching(watch):
        _on_a_clause_thread(watch, clause)
    assert torn == ["teardown"]


def test_a_clause_left_inside_a_reopened_handle_leaves_the_next_clause_alone() -> None:
    from storetest._engine import harness, stops
    from storetest._engine.profiles import PROFILES

    release = threading.Event()
    torn: list[str] = []

    class Stuck:
        def save(self, session: str, messages: Any) -> None:
            release.wait(30)

        def messages(self, session: str) -> list[Any]:
            return []

    async def reopen() -> AsyncIterator[Stuck]:
        try:
            yield Stuck()
        finally:  # run by a teardown, or by the shutdown of the loop it is on
            torn.append("teardown")

    watch = stops.Watch(0.5)

    def clause() -> None:  # what the crash clauses do: open the data anew, and call it
        with harness.open_target("c", reopen, None, {}, PROFILES["fast"], 0, "n") as handle:
            handle.run(handle.store.save("s", []))

    with stops.watching(watch):
        with harness.open_target("c", MemoryStore, None, {}, PROFILES["fast"], 0, "n") as t, \
                pytest.raises(stops.StuckCall):
            t.watch.supervise(clause)
        with harness.open_target("next", MemoryStore, None, {}, PROFILES["fast"], 0, "n"):
            later_loop = watch.loop
            release.set()  # the left clause unwinds while the next one runs
            for thread in [t for t in threading.enumerate() if t.name == "storetest-clause"]:
                thread.join(10)
            assert watch.loop is later_loop and watch.abandoned == []
    assert torn == []  # the left clause's handle: kept as it was, not torn down


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_a_clause_left_between_calls_opens_no_handle_afterwards() -> None:
    from storetest._engine import harness, stops
    from storetest._engine.profiles import PROFILES

    class RunnerTimeout(BaseException):
        pass

    def on_alarm(signum: int, frame: object) -> None:
        raise RunnerTimeout

    proceed = threading.Event()
    outcome: list[str] = []
    watch = stops.Watch(5)

    def factory() -> MemoryStore:
        outcome.append("factory called")
        return MemoryStore()

    def clause() -> None:
        proceed.wait(10)  # busy elsewhere (drawing examples) when the runner gave up
        try:
            with harness.open_target("c", factory, None, {}, PROFILES["fast"], 0, "n"):
                outcome.append("opened")
        except stops.Left:
            outcome.append("left")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with stops.watching(watch), pytest.raises(RunnerTimeout):
            watch.supervise(clause)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    later_loop = watch.loop = asyncio.new_event_loop()  # the next clause has begun
    proceed.set()
    for thread in [t for t in threading.enumerate() if t.name == "storetest-clause"]:
        thread.join(10)
    assert outcome == ["left"] and watch.loop is later_loop
    later_loop.close()


class StuckOnce(PlainStore):
    """take_steers sticks once (until released), then works; every call is noted."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, float]] = []

    def add_steer(self, session: str, text: str) -> None:
        self.calls.append(("add_steer", time.monotonic()))
        super().add_steer(session, text)

    def take_steers(self, session: str) -> list[str]:
        self.calls.append(("take_steers", time.monotonic()))
        if len(self.stuck_since) == 0:
            self.stuck_since.append(time.monotonic())
            self.release.wait(3600)
        return self.steers.pop(session, [])


def test_a_clause_left_behind_makes_no_call_once_its_stuck_call_returns() -> None:
    store = StuckOnce()
    report = storetest.check(lambda: store, clauses=STEERS, call_timeout=DEADLINE, seed=1)
    diagnosis = _judge(report, store.stuck_since, time.monotonic(), "take_steers")
    assert "abandoned, still running" in diagnosis
    left = [t for t in threading.enumerate() if t.name == "storetest-clause"]
    assert left and all(t.daemon for t in left)
    released = time.monotonic()
    store.release.set()
    for thread in left:
        thread.join(10)
    assert not any(t.is_alive() for t in left)  # it unwound
    assert [name for name, at in store.calls if at >= released] == []  # and called nothing more on its way


def test_a_clause_left_behind_that_unwinds_keeps_ctrl_c_aimed_at_the_clause_running_now() -> None:
    from storetest._engine import stops

    watch = stops.Watch()
    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    outcomes: list[str] = []

    def run(loop: asyncio.AbstractEventLoop, work: Any) -> None:
        try:
            watch.run(loop, work)
            outcomes.append("returned")
        except asyncio.CancelledError:
            outcomes.append("cancelled")

    # The left clause's run began first and ends while the later clause's is in flight.
    left = threading.Thread(target=run, args=(loops[0], asyncio.sleep(0.3)), daemon=True)
    left.start()
    time.sleep(0.1)
    later = threading.Thread(target=run, args=(loops[1], asyncio.Event().wait()), daemon=True)
    later.start()
    left.join(10)
    assert outcomes == ["returned"]
    assert watch.current is not None and not watch.current.done()  # still the later clause's task
    loops[1].call_soon_threadsafe(watch._cancel)  # what Ctrl-C does
    later.join(10)
    assert outcomes == ["returned", "cancelled"]
    for loop in loops:
        loop.close()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_an_exception_raised_on_the_watching_thread_leaves_the_clause_and_skips_its_teardown() -> None:
    class RunnerTimeout(BaseException):
        """What a test runner's own timeout raises in the main thread (pytest-timeout's signal method)."""

    def on_alarm(signum: int, frame: object) -> None:
        raise RunnerTimeout("the test runner's timeout")

    torn: list[str] = []
    store = StuckOnce()

    def factory() -> Iterator[PlainStore]:
        yield store
        torn.append("teardown")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.5)  # the store is stuck in take_steers by then
    try:
        report = storetest.check(factory, clauses=STEERS, seed=1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        released = time.monotonic()
        store.release.set()
    (result,) = report.results
    assert result.outcome == "failed" and "the test runner's timeout" in result.diagnosis, str(report)
    assert torn == []  # the clause was still in the store
    for thread in [t for t in threading.enumerate() if t.name == "storetest-clause"]:
        thread.join(10)
    assert [name for name, at in store.calls if at >= released] == []


class SignalsItselfPlain(PlainStore):
    """A plain store whose take_steers presses Ctrl-C, then takes ``seconds`` to return."""

    seconds = 0.5

    def take_steers(self, session: str) -> list[str]:
        self.stuck_since.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
        self.release.wait(self.seconds)
        return []


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
@pytest.mark.parametrize("seconds", [0.5, 3600])
def test_ctrl_c_in_a_plain_call_waits_for_it_then_tears_down_or_leaves_it(seconds: float, ctrl_c: None) -> None:
    torn: list[str] = []
    store = SignalsItselfPlain()
    store.seconds = seconds

    def factory() -> Iterator[PlainStore]:
        yield store
        torn.append("teardown")

    try:
        with pytest.raises(Interrupted) as stopped:
            storetest.check(factory, clauses=STEERS, call_timeout=DEADLINE, seed=1)
        ended = time.monotonic()
    finally:
        store.release.set()
    (result,) = stopped.value.report.results
    assert result.outcome == "interrupted", str(stopped.value.report)
    assert "take_steers('st-" in result.diagnosis  # the call in flight
    assert ended - store.stuck_since[0] < DEADLINE + SLACK
    # A call that returns is waited for and the teardown runs; one past the deadline is
    # left running, and the teardown skipped (the store may still be in use).
    assert torn == (["teardown"] if seconds < DEADLINE else [])


def _stuck_factory_report(factory: Any) -> tuple[storetest.Report, float]:
    began = time.monotonic()
    report = storetest.check(factory, clauses=QUICK, call_timeout=DEADLINE, seed=1)
    return report, time.monotonic() - began


@pytest.mark.parametrize("kind", ["plain", "async", "generator"])
def test_a_factory_that_never_returns_is_reported_within_the_deadline(kind: str) -> None:
    def plain() -> MemoryStore:
        time.sleep(3600)
        return MemoryStore()

    async def asynchronous() -> MemoryStore:
        await asyncio.Event().wait()
        return MemoryStore()

    def generator() -> Iterator[MemoryStore]:
        threading.Event().wait(3600)
        yield MemoryStore()

    factory = {"plain": plain, "async": asynchronous, "generator": generator}[kind]
    report, took = _stuck_factory_report(factory)
    first = report.results[0]
    assert first.outcome == "error" and first.setup, str(report)
    assert first.diagnosis.startswith(f"the factory did not return within {DEADLINE:g} s while making the store")
    assert len(report.results) == 1 and len(report.not_run) == len(storetest.clauses.CLAUSES) - 1
    assert took < DEADLINE + SLACK, took


@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_teardown_that_never_returns_is_reported(kind: str) -> None:
    def plain() -> Iterator[MemoryStore]:
        yield MemoryStore()
        time.sleep(3600)

    async def asynchronous() -> AsyncIterator[MemoryStore]:
        yield MemoryStore()
        await asyncio.sleep(3600)

    report, _ = _stuck_factory_report(plain if kind == "plain" else asynchronous)
    assert report.results[0].outcome == "error"
    assert f"did not return within {DEADLINE:g} s while tearing the store down" in report.results[0].diagnosis


def test_the_heartbeat_names_the_call_in_flight() -> None:
    seen: list[Progress] = []
    AsyncStore.stuck_since = []
    storetest.check(AsyncStore, clauses=STEERS, call_timeout=DEADLINE, seed=1, heartbeat=0.2,
                    progress=lambda p: seen.append(Progress(**vars(p))))
    lines = [p.flying() for p in seen if p.in_flight]
    assert any(line.startswith("in flight: take_steers('st-") and "on the factory's store for" in line
               for line in lines), lines


def test_the_deadline_is_the_profiles_and_refuses_nonsense() -> None:
    from storetest._engine.profiles import PROFILES

    assert {p.call_timeout for p in PROFILES.values()} == {60.0}
    # Above every bound a reference store sets on its own calls (PostgresStore's timeout=30).
    import inspect

    from reference_stores.postgres import PostgresStore
    assert inspect.signature(PostgresStore).parameters["timeout"].default < 60.0
    for bad in (0, -1, float("inf"), "soon"):
        with pytest.raises(ValueError, match="call-timeout must be a number of seconds"):
            storetest.check(MemoryStore, clauses=QUICK, call_timeout=bad)  # type: ignore[arg-type]


class ExitingStore(MemoryStore):
    async def take_steers(self, session: str) -> list[str]:
        raise KeyboardInterrupt


def test_a_store_that_raises_keyboard_interrupt_fails_as_itself() -> None:
    report = storetest.check(ExitingStore, clauses=STEERS, seed=1)
    (result,) = report.results
    assert result.outcome == "failed", str(report)
    assert "take_steers() raised KeyboardInterrupt (a store method must not stop the program)" in result.diagnosis


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_ctrl_c_under_check_reports_the_clause_interrupted_and_tears_it_down(ctrl_c: None) -> None:
    torn: list[str] = []

    class SignalsItself(MemoryStore):
        async def take_steers(self, session: str) -> list[str]:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this call is in flight
            await asyncio.sleep(30)
            return []

    async def factory() -> AsyncIterator[SignalsItself]:
        yield SignalsItself()
        torn.append("teardown")

    began = time.monotonic()
    with pytest.raises(Interrupted) as stopped:
        storetest.check(factory, clauses=["tool_arguments_are_kept_verbatim", "save_replaces_the_transcript",
                                          *STEERS], seed=1)
    assert time.monotonic() - began < 20  # not the 30 s the call would take
    report = stopped.value.report
    assert [r.outcome for r in report.results] == ["passed", "passed", "interrupted"], str(report)
    assert report.interrupted == "interrupted after 2 of 3 claimed clauses"
    assert "take_steers('st-" in report.results[-1].diagnosis  # the call in flight
    assert not report.ok and report.failures() == []
    assert torn == ["teardown"] * 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
@pytest.mark.parametrize("factory", [MemoryStore, Noting], ids=["async", "plain"])
def test_ctrl_c_ends_the_idle_clauses_wait(factory: Any, ctrl_c: None) -> None:
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))  # Ctrl-C while it waits
    began = time.monotonic()
    timer.start()
    try:
        with pytest.raises(Interrupted) as stopped:
            storetest.check(factory, clauses=["data_survives_idle"], idle=10, seed=1)
    finally:
        timer.cancel()
    assert time.monotonic() - began < 5  # not the 10 s of the wait
    assert [r.outcome for r in stopped.value.report.results] == ["interrupted"]


class StuckAfterCtrlC(MemoryStore):
    """A call that reaches its deadline once Ctrl-C has come (a race's call, say)."""

    async def take_steers(self, session: str) -> list[str]:
        from storetest._engine import stops

        stops.current().interrupted = True
        raise stops.StuckCall(f"take_steers({session!r})", session, DEADLINE, "abandoned")


def test_a_deadline_reached_after_ctrl_c_is_the_interruptions_not_the_stores() -> None:
    with pytest.raises(Interrupted) as stopped:
        storetest.check(StuckAfterCtrlC, clauses=STEERS, seed=1)
    (result,) = stopped.value.report.results
    assert result.outcome == "interrupted", str(stopped.value.report)


def test_a_script_without_a_main_guard_is_told_to_add_one(tmp_path: Path) -> None:
    """When children are spawned, each re-runs the script (forked ones do not)."""
    import subprocess

    (tmp_path / "script.py").write_text(textwrap.dedent("""
        import storetest
        from tests.item_histories import sqlite_items
        report = storetest.check(sqlite_items, clauses=["adds_from_processes_land_whole"], seed=1)
        print(report.results[0].outcome, report.results[0].diagnosis)
    """))
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root), "STORETEST_CHILDREN": "spawn"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("error ") and 'if __name__ == "__main__":' in done.stdout, done.stdout
    assert "bootstrapping" not in done.stdout + done.stderr


pytest_plugins = ["pytester"]


def test_the_plugin_takes_the_deadline_from_its_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        from reference_stores.memory import MemoryStore
        from storetest import run_conformance

        class Stuck(MemoryStore):
            async def take_steers(self, session):
                await asyncio.Event().wait()

        run_conformance(Stuck, name="stuck")
        """
    )
    result = pytester.runpytest("-k", "in_order_exactly_once", "--storetest-call-timeout=0.5")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*take_steers('st-*') on the factory's store did not return within 0.5 s*"])
    assert pytester.runpytest("--storetest-call-timeout=0").ret == pytest.ExitCode.USAGE_ERROR
