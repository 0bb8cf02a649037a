"""What docs/contract.md says about factories and stores, checked: once per clause, torn
down after each (also after a failure), the replica after the store with ``primary``,
``tmp_path`` per clause, and where a store's methods run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

import storetest
from storetest import Message, check_messages, check_session_id, check_steer_text, runner

#: Quick clauses: two single-handle ones and a replica one.
QUICK = ["unknown_session_is_empty", "save_replaces_the_transcript", "replicas_share_transcripts"]


class Backend:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.transcripts: dict[str, list[Message]] = {}
        self.steers: dict[str, list[str]] = {}


class DictStore:
    """A plain store over a shared :class:`Backend`; ``threads`` records where it ran."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.threads: set[threading.Thread] = set()

    def save(self, session: str, messages: Sequence[Message]) -> None:
        self.threads.add(threading.current_thread())
        session, items = check_session_id(session), check_messages(messages)
        with self.backend.lock:
            self.backend.transcripts[session] = list(items)

    def messages(self, session: str) -> list[Message]:
        self.threads.add(threading.current_thread())
        session = check_session_id(session)
        with self.backend.lock:
            return list(self.backend.transcripts.get(session, []))

    def add_steer(self, session: str, text: str) -> None:
        session, text = check_session_id(session), check_steer_text(text)
        with self.backend.lock:
            self.backend.steers.setdefault(session, []).append(text)

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        with self.backend.lock:
            return self.backend.steers.pop(session, [])


class Forgetful(DictStore):
    """Answers ``None`` for a session never used: fails ``unknown_session_is_empty``."""

    def messages(self, session: str) -> list[Message]:
        got = super().messages(session)
        return got if got or session in self.backend.transcripts else None  # type: ignore[return-value]


def test_the_factory_is_called_once_per_clause_and_torn_down_after_each() -> None:
    events: list[str] = []

    def factory() -> Iterator[DictStore]:
        events.append("open")
        yield DictStore(Backend())
        events.append("close")

    report = storetest.check(factory, clauses=QUICK[:2], seed=1)
    assert report.ok, str(report)
    assert events == ["open", "close", "open", "close"]


def test_skipped_clauses_call_no_factory_and_unclaimed_ones_do() -> None:
    calls: list[str] = []

    class TranscriptsOnly:
        def save(self, session: str, messages: Sequence[Message]) -> None: ...
        def messages(self, session: str) -> list[Message]:
            return []

    def factory() -> TranscriptsOnly:
        calls.append("factory")
        return TranscriptsOnly()

    report = storetest.check(factory, clauses=["unknown_session_is_empty", "replicas_share_transcripts",
                                               "steers_are_taken_in_order_exactly_once"],
                             skip={"unknown_session_is_empty": "not today"}, seed=1)
    assert [r.outcome for r in report.results] == ["skipped", "not claimed", "skipped"]  # in clause order
    assert calls == ["factory"]


def test_a_failed_clause_is_still_torn_down_and_stays_failed() -> None:
    events: list[str] = []

    def factory() -> Iterator[DictStore]:
        events.append("open")
        yield Forgetful(Backend())
        events.append("close")
        raise RuntimeError("teardown broke too")

    report = storetest.check(factory, clauses=["unknown_session_is_empty"], seed=1)
    assert events == ["open", "close"]
    assert report.results[0].outcome == "failed"


def test_a_teardown_that_raises_after_a_pass_is_an_error() -> None:
    def factory() -> Iterator[DictStore]:
        yield DictStore(Backend())
        raise RuntimeError("could not close")

    report = storetest.check(factory, clauses=["unknown_session_is_empty"], seed=1)
    assert report.results[0].outcome == "error"
    assert "could not close" in report.results[0].diagnosis


def test_the_replica_comes_after_the_store_gets_it_as_primary_and_goes_first(tmp_path: Path) -> None:
    events: list[str] = []
    made: list[DictStore] = []

    def factory(tmp_path: Path) -> Iterator[DictStore]:
        events.append("store")
        made.append(DictStore(Backend()))
        yield made[-1]
        events.append("close store")

    def replica(primary: DictStore, tmp_path: Path) -> Iterator[DictStore]:
        assert primary is made[-1]
        events.append("replica")
        yield DictStore(primary.backend)
        events.append("close replica")

    report = storetest.check(factory, replica, clauses=["replicas_share_transcripts"], seed=1)
    assert report.ok, str(report)
    assert events == ["store", "replica", "close replica", "close store"]


def test_tmp_path_is_a_new_empty_directory_per_clause_shared_by_store_and_replica() -> None:
    seen: list[tuple[str, Path]] = []

    def factory(tmp_path: Path) -> DictStore:
        assert tmp_path.is_dir() and not any(tmp_path.iterdir())
        (tmp_path / "store-was-here").touch()
        seen.append(("store", tmp_path))
        return DictStore(Backend())

    def replica(primary: DictStore, tmp_path: Path) -> DictStore:
        seen.append(("replica", tmp_path))
        return DictStore(primary.backend)

    report = storetest.check(factory, replica, clauses=QUICK, seed=1)
    assert report.ok, str(report)
    store_dirs = [p for who, p in seen if who == "store"]
    assert len(set(store_dirs)) == 3
    # With replica=, every clause that runs makes both, on the same directory.
    assert [p for who, p in seen if who == "replica"] == store_dirs
    assert not any(p.exists() for p in store_dirs)


def _tmp_path_parents(clauses: list[str] = QUICK) -> set[Path]:
    seen: list[Path] = []

    def factory(tmp_path: Path) -> DictStore:
        seen.append(tmp_path)
        return DictStore(Backend())

    report = storetest.check(factory, clauses=clauses, seed=1)
    assert report.ok, str(report)
    return {p.parent for p in seen}


@pytest.fixture
def no_temporary_directory_named(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ram_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A directory that stands for /dev/shm: a tmpfs with room."""
    monkeypatch.setattr(runner, "RAM_DIRECTORY", str(tmp_path))
    monkeypatch.setattr(runner, "RAM_DIRECTORY_MIN_FREE", 1)
    monkeypatch.setattr(runner, "_on_tmpfs", lambda path: path == str(tmp_path))
    return tmp_path


@pytest.mark.usefixtures("no_temporary_directory_named")
def test_tmp_path_is_made_in_ram_where_it_has_room(monkeypatch: pytest.MonkeyPatch, ram_directory: Path) -> None:
    """A store's fsyncs cost nothing in RAM (the SQLite store's were about a quarter
    of the default check)."""
    assert _tmp_path_parents() == {ram_directory}
    assert not any(ram_directory.iterdir())
    monkeypatch.setattr(runner, "RAM_DIRECTORY_MIN_FREE", 1 << 62)  # no room
    assert ram_directory not in _tmp_path_parents()
    monkeypatch.setattr(runner, "RAM_DIRECTORY_MIN_FREE", 1)
    monkeypatch.setattr(runner, "_on_tmpfs", lambda path: False)  # on a disk
    assert ram_directory not in _tmp_path_parents()
    monkeypatch.setattr(runner, "RAM_DIRECTORY", str(ram_directory / "missing"))
    assert _tmp_path_parents() == {Path(tempfile.gettempdir())}


@pytest.mark.usefixtures("ram_directory")
def test_a_temporary_directory_named_in_the_environment_turns_the_ram_directory_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    for name in ("TMPDIR", "TEMP", "TMP"):
        with monkeypatch.context() as m:
            for other in ("TMPDIR", "TEMP", "TMP"):
                m.delenv(other, raising=False)
            assert runner.scratch_directory() == str(tmp_path)
            m.setenv(name, str(tmp_path / "chosen"))
            assert runner.scratch_directory() is None, name


@pytest.mark.usefixtures("no_temporary_directory_named")
def test_dev_shm_is_chosen_exactly_where_it_is_a_tmpfs_with_room() -> None:
    """On these machines it is; where it is not, the temporary directory is used."""
    mounts = Path("/proc/mounts").read_text().split("\n") if Path("/proc/mounts").exists() else []
    tmpfs = any(line.split()[1:3] == [os.path.realpath("/dev/shm"), "tmpfs"] for line in mounts if line)
    room = False
    if tmpfs:
        stats = os.statvfs("/dev/shm")
        room = stats.f_bavail * stats.f_frsize >= runner.RAM_DIRECTORY_MIN_FREE
    assert runner.scratch_directory() == ("/dev/shm" if tmpfs and room else None)


def test_a_parameter_check_cannot_supply_is_refused_up_front() -> None:
    def factory(my_pool: object) -> DictStore:
        return DictStore(Backend())

    with pytest.raises(TypeError, match=r"'my_pool'.*tmp_path, storetest_postgres_url"):
        storetest.check(factory, clauses=QUICK[:1])
    report = storetest.check(factory, clauses=QUICK[:1], fixtures={"my_pool": None}, seed=1)
    assert report.ok


def test_plain_methods_run_in_threads_and_the_factory_on_the_event_loops_thread() -> None:
    stores: list[DictStore] = []
    factory_threads: list[threading.Thread] = []

    def factory() -> DictStore:
        factory_threads.append(threading.current_thread())
        stores.append(DictStore(Backend()))
        return stores[-1]

    report = storetest.check(factory, clauses=["concurrent_saves_leave_one_transcript"], seed=1)
    assert report.ok, str(report)
    # On the thread the clause's event loop runs on, the caller's thread watching it (issue 44).
    assert [t.name for t in factory_threads] == ["storetest-loop"]
    assert threading.current_thread() not in stores[0].threads
    assert len(stores[0].threads) > 1


def test_async_methods_run_on_the_loop_the_factory_ran_on() -> None:
    loops: dict[str, set[asyncio.AbstractEventLoop]] = {"factory": set(), "methods": set()}

    class AsyncStore:
        def __init__(self) -> None:
            self.inner = DictStore(Backend())

        async def save(self, session: str, messages: Sequence[Message]) -> None:
            loops["methods"].add(asyncio.get_running_loop())
            self.inner.save(session, messages)

        async def messages(self, session: str) -> list[Message]:
            loops["methods"].add(asyncio.get_running_loop())
            return self.inner.messages(session)

    async def factory() -> AsyncIterator[AsyncStore]:
        loops["factory"].add(asyncio.get_running_loop())
        yield AsyncStore()

    report = storetest.check(factory, clauses=["save_replaces_the_transcript"], seed=1)
    assert report.ok, str(report)
    assert len(loops["factory"]) == 1 and loops["methods"] == loops["factory"]


def test_a_database_that_cannot_be_had_makes_the_clause_an_error_under_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from storetest import databases

    @contextlib.contextmanager
    def unavailable(backend: str) -> Iterator[str]:
        raise databases.Unavailable(f"no {backend} here")
        yield ""  # pragma: no cover

    monkeypatch.setattr(databases, "throwaway", unavailable)

    def factory(storetest_postgres_url: str) -> DictStore:
        return DictStore(Backend())

    report = storetest.check(factory, clauses=QUICK[:1], seed=1)
    assert report.results[0].outcome == "error"
    assert "no postgres here" in report.results[0].diagnosis
