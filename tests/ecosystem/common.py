"""What every SDK module in ``tests/ecosystem`` lists: its contenders and their defects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Contender:
    """One store from another project, as ``docs/ecosystem.md`` judges it.

    ``binding`` returns what ``storetest.check`` takes (``item_sessions(...)`` and the
    like), built lazily so that listing contenders imports no SDK; ``None`` with
    ``not_runnable`` saying why (no server here, needs a paid API, ...).
    """

    name: str  # as the table shows it: "SQLiteSession (file)"
    project: str  # the distribution that ships it: "openai-agents"
    binding: Callable[[], Any] | None
    backends: tuple[str, ...] = ()  # throwaway databases it needs: ("postgres",)
    not_runnable: str = ""
    clauses: tuple[str, ...] = field(default=())  # empty: every clause it claims
    # clauses that do not apply to it, each with why ("an in-memory database lives in one
    # process"): passed to check(skip=...), shown as "not applicable" in the table
    skip: Mapping[str, str] = field(default_factory=dict)
    # run the crash clauses too, reopening the data with the binding itself (check(reopen=...))
    reopen: bool = False


@dataclass(frozen=True)
class Defect:
    """A failing verdict, with the minimal repro that shows it through the store's own API.

    ``repro`` is a path from the repository root to a script whose ``main()`` returns
    normally when the defect is there (and raises ``AssertionError`` saying what it saw
    otherwise); ``tests/ecosystem/test_repros.py`` runs every one. Its parameters, if
    any, are fixture names (``storetest_mysql_url``, ``storetest_redis_url``...), filled
    under pytest; run alone (``None``), it starts throwaway servers of its own. ``deterministic`` is
    True only where the repro forces the interleaving; for a provoked race,
    ``miss_rate`` states the measured chance that the bounded loop misses it.
    """

    contender: str  # Contender.name
    clause: str
    summary: str  # one line, for the closing note and the table
    repro: str
    deterministic: bool
    miss_rate: str = ""  # "below 1 in 10,000 (0 misses in 20,000 runs)"
