"""Deliberately broken stores, each carrying one realistic bug, and the helper that runs
one of them against the clause meant to catch it.

Like Go's ``fstest`` testing itself against odd file systems: if the suite ever stops
catching one of these, a clause has gone blind. Each variant module (one per backend
family) lists its stores in ``BROKEN``; :func:`registry` gathers them all.

A factory's parameters are pytest fixtures resolved by name (``tmp_path``,
``storetest_postgres_url``, ``storetest_mysql_url``), as with ``run_conformance``; a
replica factory may also ask for ``primary``, the store the factory made.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storetest._harness import open_target, parameter_names
from storetest.clauses import CLAUSES, ConformanceFailure, conformance_failures
from storetest.plugin import PROFILES

__all__ = ["BrokenStore", "diagnoses", "registry", "run_clause"]

_CLAUSES = {clause.__name__: clause for clause in CLAUSES}
_MODULES = ("memory_variants", "sqlite_variants", "postgres_variants", "mysql_variants")


@dataclass(frozen=True)
class BrokenStore:
    """One broken store and what the suite must say about it."""

    name: str
    bug: str  #: the bug, one line
    wild: str  #: where it happens in the wild
    clause: str  #: the clause function (storetest/clauses.py) that must catch it
    diagnosis: str  #: a substring of the diagnosis that clause must give
    factory: Callable[..., Any]
    replica: Callable[..., Any] | None = None
    racy: bool = False  #: caught by a concurrency clause: must be killed on every seed
    #: the Hypothesis profile that catches it on every seed; "fast" unless only random
    #: generation can find the bug (see docs/broken-stores.md, "gaps")
    profile: str = "fast"

    def __post_init__(self) -> None:
        if self.clause not in _CLAUSES:
            raise ValueError(f"{self.name}: no clause named {self.clause!r}")

    @property
    def backend(self) -> str:
        return self.factory.__module__.rsplit(".", 1)[-1].removesuffix("_variants")

    def fixtures(self) -> list[str]:
        """The pytest fixtures its factories need."""
        names = [*parameter_names(self.factory), *parameter_names(self.replica or self.factory)]
        return [n for n in dict.fromkeys(names) if n != "primary"]


def registry() -> list[BrokenStore]:
    """Every broken store, from every variant module."""
    stores: list[BrokenStore] = []
    for module in _MODULES:
        stores += importlib.import_module(f"{__name__}.{module}").BROKEN
    names = [s.name for s in stores]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"broken store names must be unique: {duplicates}")
    return stores


def run_clause(
    broken: BrokenStore,
    fixture: Callable[[str], Any],
    seed: int,
    profile: str | None = None,
    clause: str | None = None,
) -> ConformanceFailure | None:
    """Run one clause (by default the one meant for ``broken``) against a fresh store;
    return the :class:`ConformanceFailure` it raised, or ``None`` if it passed.

    Built as ``run_conformance`` builds each clause test: a new event loop, the store
    (and replica) behind :class:`Handle`, a :class:`Target` with the profile and seed.
    Any other error (the store crashed) propagates.

    :param fixture: gives a pytest fixture's value by name (``request.getfixturevalue``).
    """
    name = clause or broken.clause
    available = {n: fixture(n) for n in broken.fixtures()}
    settings = PROFILES[profile or broken.profile]
    with open_target(name, broken.factory, broken.replica, available, settings, seed) as target:
        try:
            _CLAUSES[name](target)
        except BaseException as exc:
            failures = conformance_failures(exc)
            if failures:
                return failures[0]
            raise
        return None


def diagnoses(failure: ConformanceFailure) -> list[str]:
    """The failure's summary diagnosis, then every violation's."""
    return [failure.diagnosis, *(v.diagnosis for v in failure.violations)]
