"""Deliberately broken stores, each carrying one realistic bug, and the helper that runs
one of them against the clause meant to catch it.

Like Go's ``fstest`` testing itself against odd file systems: if the suite ever stops
catching one of these, a clause has gone blind. Each variant module (one per backend
family) lists its stores in ``BROKEN``; :func:`registry` gathers them all.

A factory's parameters are pytest fixtures resolved by name (``tmp_path``,
``storetest_postgres_url``, ``storetest_mysql_url``, ``storetest_redis_url``,
``storetest_redis_cluster_url``, ``storetest_redis_prefix``), as with ``run_conformance``; a
replica factory may also ask for ``primary``, the store the factory made.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storetest import ClauseResult, check
from storetest.clauses import CLAUSES

__all__ = ["BrokenStore", "diagnoses", "fixtures_outside_pytest", "registry", "run_clause"]

_CLAUSES = {clause.name for clause in CLAUSES}
_MODULES = (
    "memory_variants", "sqlite_variants", "postgres_variants", "mysql_variants", "redis_variants", "log_variants",
    "item_variants", "adk_variants", "crash_variants", "chat_variants", "explained_variants",
    "checkpoint_variants",
    "agent_framework_variants", "agent_framework_sessions_variants", "agent_framework_sqlite_variants",
    "llama_index_variants", "llama_index_db_variants",
)


@dataclass(frozen=True)
class BrokenStore:
    """One broken store and what the suite must say about it."""

    name: str
    bug: str  #: the bug, one line
    wild: str  #: where it happens in the wild
    clause: str  #: the clause (a function in storetest/clauses/) that must catch it
    diagnosis: str  #: a substring of the diagnosis that clause must give
    factory: Callable[..., Any]
    replica: Callable[..., Any] | None = None
    racy: bool = False  #: caught by a concurrency clause: must be killed on every seed
    #: the Hypothesis profile that catches it on every seed; "fast" unless only random
    #: generation can find the bug (see docs/broken-stores.md, "gaps")
    profile: str = "fast"
    #: seconds for the opt-in ``data_survives_idle`` clause (``check(idle=...)``)
    idle: float | None = None
    #: opens the same data from another process, for the crash clauses (``check(reopen=...)``)
    reopen: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if self.clause not in _CLAUSES:
            raise ValueError(f"{self.name}: no clause named {self.clause!r}")

    @property
    def backend(self) -> str:
        return self.factory.__module__.rsplit(".", 1)[-1].removesuffix("_variants")

    def fixtures(self) -> list[str]:
        """The pytest fixtures its factories need."""
        names = [*_parameters(self.factory), *_parameters(self.replica or self.factory)]
        return [n for n in dict.fromkeys(names) if n != "primary"]


def _parameters(fn: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.default is p.empty]


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
) -> ClauseResult | None:
    """Run one clause (by default the one meant for ``broken``) against a fresh store
    through :func:`storetest.check`; return its result if it failed, ``None`` if it passed.

    :param fixture: gives a pytest fixture's value by name (``request.getfixturevalue``).
    :raises AssertionError: the clause did neither (skipped, not claimed, or errored).
    """
    name = clause or broken.clause
    report = check(broken.factory, broken.replica, clauses=[name], profile=profile or broken.profile,
                   seed=seed, fixtures=fixture, name=broken.name, idle=broken.idle, reopen=broken.reopen)
    (result,) = report.results
    if result.outcome == "passed":
        return None
    assert result.outcome == "failed", (
        f"{broken.name}: {name} did not run: {result.outcome}: {result.details or result.diagnosis}"
    )
    return result


@contextlib.contextmanager
def fixtures_outside_pytest() -> Iterator[Callable[[str], Any]]:
    """What the broken stores' factories ask for, outside pytest (the scripts): a new
    ``tmp_path`` each time, and one throwaway database per backend for the whole block."""
    from storetest import databases

    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}
        redis_prefix = databases.new_prefix()

        def fixture(name: str) -> Any:
            if name == "tmp_path":
                return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="broken-")))
            if name == "storetest_redis_prefix":
                return redis_prefix
            backend = name.removeprefix("storetest_").removesuffix("_url").replace("_", "-")
            if backend not in urls:
                if backend in ("redis", "redis-cluster"):
                    target = databases.throwaway(backend, prefix=redis_prefix)
                    urls[backend] = stack.enter_context(target).url
                else:
                    urls[backend] = stack.enter_context(databases.throwaway(backend))
            return urls[backend]

        yield fixture


def diagnoses(failure: ClauseResult) -> list[str]:
    """The failure's summary diagnosis, then every violation's."""
    return [failure.diagnosis, *(v.diagnosis for v in failure.violations)]
