"""The fault suite: the reference stores on real servers, under SIGKILL of the processes
using them and under connections killed at random points of every operation. This
file holds the SQLite part and the suite's own checks; ``test_faults_postgres.py``
and ``test_faults_mysql.py`` the rest (so CI's database jobs can run theirs alone).

- SIGKILL (SQLite, PostgreSQL, MariaDB): a saving, an adding and a taking process run
  at once and are killed at random moments, ``STORETEST_FAULT_KILLS`` times per backend
  (default 120; see :mod:`tests.faults.kill`).
- Connection kills (PostgreSQL, MariaDB): ``pg_terminate_backend`` / ``KILL`` of the
  stores' connections, and cuts right after a COMMIT reached the server,
  ``STORETEST_FAULT_CONNECTION_KILLS`` times per backend (default 100; see
  :mod:`tests.faults.connkill`). SQLite has no connection to kill.

Each asserts 0 torn transcripts, 0 failed saves that changed something, 0 steers lost
(by a take that returned or raised anything but ``OutcomeUnknown``), 0 duplicated
(beyond retries after ``OutcomeUnknown``), 0 unexpected, 0 out of order, and that
every error is a ``StoreError`` naming its operation, its session and its cause. The
figures are printed (``pytest -rP`` shows them) and, with ``STORETEST_FAULT_FIGURES``
set to a path, appended to that file as JSON lines.

The MongoDB store stays out: no real MongoDB server can be had here (mongomock is not
MongoDB, and a fault in a fake proves nothing about the real thing).
"""

from __future__ import annotations

from pathlib import Path

from tests.faults import kill
from tests.faults.settings import KILLS, SEED, report


def test_sigkill_of_saving_adding_and_taking_processes(tmp_path: Path) -> None:
    """SQLite processes killed mid-save, mid-add and mid-take leave whole transcripts
    and a queue that lost, duplicated and reordered nothing."""
    from reference_stores.sqlite import SQLiteStore

    path = tmp_path / "faults.db"
    # Remembering nothing, so every read comes from the rows themselves.
    checker = SQLiteStore(path, cache_sessions=0)
    try:
        figures = kill.run(lambda: SQLiteStore(path), checker, KILLS, tmp_path, SEED)
    finally:
        checker.close()
    report("SIGKILL sqlite", figures)


# -- the judges themselves ------------------------------------------------------------------


def test_whole_tells_a_torn_transcript_from_a_whole_one() -> None:
    from tests.faults.workload import transcript, whole

    full = transcript("w", 3)
    assert whole(full) == ("w", 3)
    assert whole(full[:-1]) is None
    assert whole([*transcript("w", 2)[:-1], full[-1]]) is None
    assert whole([]) == ("", 0)


def test_the_ledger_counts_what_the_contract_forbids() -> None:
    """Each figure the suite requires to be 0 does count its fault."""
    from storetest.contract import OutcomeUnknown, StoreError
    from tests.faults.workload import SteerLedger

    ledger = SteerLedger()
    for text in ("a:1", "a:2", "a:3", "a:4"):
        ledger.added(text, None)
    ledger.added("a:5", StoreError("add_steer to session 'q' failed: x"))
    ledger.added("a:6", OutcomeUnknown("add_steer to session 'q' may or may not ...: x"))
    ledger.added("a:6", None)  # the retry: a:6 may now be queued twice
    ledger.took(None, OutcomeUnknown("take_steers ...", steers=["a:3"]))
    ledger.took(["a:2", "a:1"], None)  # out of order
    ledger.took(["a:2", "a:5", "a:6", "a:6"], None)  # a:2 twice; a:5 failed to add
    figures = ledger.verdict()
    assert figures["reordered"] == 1
    assert figures["duplicated"] == 1
    assert figures["unexpected"] == 1
    assert figures["lost"] == 1  # a:4; a:3 may have gone with the unknown take
    assert figures["duplicated after OutcomeUnknown retries"] == 1


def test_a_steer_of_unknown_outcome_may_land_after_later_ones() -> None:
    """An add that raised OutcomeUnknown may land late: held in a stalled network, its
    command reaches the server after its retry and the next add returned."""
    from storetest.contract import OutcomeUnknown
    from tests.faults.workload import SteerLedger

    ledger = SteerLedger()
    ledger.added("a:1", OutcomeUnknown("add_steer to session 'q' may or may not ...: x"))
    ledger.added("a:1", None)  # the retry
    ledger.added("a:2", None)
    ledger.took(["a:1", "a:2", "a:1"], None)  # then the first attempt's command arrives
    figures = ledger.verdict()
    assert figures["reordered"] == 0 and figures["duplicated"] == 0 and figures["lost"] == 0
    ledger.added("a:3", None)
    ledger.added("a:4", None)
    ledger.took(["a:4", "a:3"], None)  # acknowledged steers out of order still count
    assert ledger.verdict()["reordered"] == 1
