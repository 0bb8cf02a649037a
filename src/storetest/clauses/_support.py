"""Hypothesis glue and small helpers the clause modules share."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed
from hypothesis import configuration as _configuration
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as _engine
from hypothesis.reporting import with_reporter

from storetest._engine.explain import names_a_cause
from storetest._engine.failures import announce, describe_exception, failure_listeners, store_frame
from storetest._engine.harness import Target, code_roots
from storetest.contract import Message

__all__ = [
    "ended_by_the_store",
    "examples",
    "hypothesis_cache",
    "hypothesis_home",
    "hypothesis_settings",
    "reporting_to",
    "run_uncaught",
    "seeded_machine",
    "shrink_budget",
    "texts",
]


def _own_files_are_not_local() -> None:
    """Keep storetest's own source out of the literals Hypothesis mixes into what it draws.

    Hypothesis reads the literals of every *local* module (one not under site-packages
    or the standard library) and draws them now and then as values. Installed, storetest
    and reference_stores are under site-packages; from a checkout or an editable install
    their ~60 modules counted as local: ~1,700 of storetest's own literals (table
    names, limits, messages) went into the store's inputs, reading them took ~35 ms, and
    every new shape of draw filtered them all (~0.25 s of a default check). Their
    files are not local now, wherever storetest is installed; the store's own modules
    (the caller's code) are, as before. Hypothesis reads that module global and offers
    no setting for it: a version without it is left alone."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    is_local = getattr(providers, "is_local_module_file", None)
    if is_local is None or getattr(is_local, "storetest_own_files", None) is not None:
        return
    import reference_stores
    import storetest

    own = tuple(os.path.dirname(package.__file__ or "") + os.sep for package in (storetest, reference_stores))

    # Nor is the standard library local, which Hypothesis finds out by resolving each of
    # its ~250 modules' paths (~10 ms a process): its directory, as the path names it.
    stdlib = tuple({os.path.dirname(os.__file__) + os.sep, os.path.realpath(os.path.dirname(os.__file__)) + os.sep})

    def not_ours(path: str) -> bool:
        return not path.startswith(own) and not path.startswith(stdlib) and bool(is_local(path))

    not_ours.storetest_own_files = own  # type: ignore[attr-defined]
    setattr(providers, "is_local_module_file", not_ours)  # noqa: B010 (not exported, to mypy)


_own_files_are_not_local()


def hypothesis_settings(t: Target, *, scale: float = 1.0, steps: int | None = None) -> Settings:
    """Settings for one property of this run: the profile's example count (times
    ``scale``, for expensive examples), no deadline (a database's latency is not the
    store's bug), and no example database, so a seed alone decides every input."""
    return Settings(
        max_examples=max(2, int(t.profile.examples * scale)),
        stateful_step_count=steps or 50,
        deadline=None,
        database=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        # No "explain" phase: it reruns a failure many more times to annotate it, and
        # against a database each rerun costs round trips.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )


def examples(
    t: Target, *strategies: st.SearchStrategy[Any], scale: float = 1.0
) -> Callable[[Callable[..., None]], Callable[[], None]]:
    """Turn a function of generated values into a Hypothesis test, seeded for this run."""

    def decorate(fn: Callable[..., None]) -> Callable[[], None]:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> None:
            t.tick()
            fn(*args, **kwargs)

        test = seed(t.seed)(hypothesis_settings(t, scale=scale)(given(*strategies)(counted)))
        # The key of an example database, which a run has none of (database=None): given
        # none, Hypothesis hashes the test's source (inspect and tokenize, ~2 ms a clause)
        # for a key nothing reads. It reads this attribute first (find() sets it so).
        test._hypothesis_internal_database_key = None  # type: ignore[attr-defined]
        return test

    return decorate


def seeded_machine(t: Target, machine: type) -> Any:
    """What a clause passes ``run_state_machine_as_test``: a factory of ``machine``,
    seeded for this run (the seed goes on the factory: that is where Hypothesis looks).

    A ``partial``, not the class: Hypothesis hashes its factory's source for an example
    database key (a run has no database), and a class's source is found by parsing its
    whole module (~8 ms a clause); a ``partial`` has no source to hash."""
    return seed(t.seed)(functools.partial(machine))


def ended_by_the_store(t: Target, error: BaseException) -> str | None:
    """The line for an exception the store raised that no clause caught (it ended the
    example): the call, the exception, and the store's own frame it came from, as
    :meth:`~storetest._engine.failures.Check.call` names one it caught:
    ``save() on the factory's store raised StoreError: ... (at store.py:12 in save)``.
    ``None`` when no call of the store raised ``error`` (the harness's own)."""
    call = next((what for what, raised in t.errors if raised is error), None)
    if call is None:
        return None
    return f"{call} raised {describe_exception(error)}{store_frame(error, code_roots(t.store.raw))}"


def run_uncaught(t: Target, work: Any) -> Any:
    """``t.run(work)`` where nothing catches what the store raises (a state machine's
    rule): the failure listeners hear the raise as it happens, as they hear a clause's
    violations, so a raise that names the store's frame is shrunk as briefly as any
    line that names its cause."""
    try:
        return t.run(work)
    except Exception as exc:
        line = ended_by_the_store(t, exc)
        if line is not None:
            announce(line)
        raise


@contextmanager
def shrink_budget(steps: int, seconds: float, named: int | None = None) -> Iterator[None]:
    """Let Hypothesis shrink a failure by ``steps`` successful shrinks, or for
    ``seconds``, whichever comes first (it then reports the smallest example found so
    far); by ``named`` successful shrinks when the clause's first failure already names
    its cause (:func:`~storetest._engine.explain.names_a_cause`).

    The step counts keep a replay exact (the same seed fails first the same way and
    shrinks the same way); the seconds only stop a store so slow that the steps would
    take too long."""
    # Hypothesis reads these module globals while shrinking and offers no public
    # setting for them. If a future version drops them, shrinking is merely slower.
    previous = {name: getattr(_engine, name, None) for name in ("MAX_SHRINKS", "MAX_SHRINKING_SECONDS")}
    _engine.MAX_SHRINKS = steps
    _engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    first: list[str] = []

    def seen(diagnosis: str) -> None:
        # Shrinking is most of a failing clause's time (a state machine's ~100 reruns);
        # a line that names the cause is what the author acts on, the example only
        # illustrates it, so a few shrinks (the big cuts come first) are enough.
        if not first:
            first.append(diagnosis)
            if named is not None and names_a_cause(diagnosis):
                _engine.MAX_SHRINKS = min(steps, named)

    failure_listeners.append(seen)
    try:
        yield
    finally:
        failure_listeners.remove(seen)
        for name, value in previous.items():
            if value is not None:
                setattr(_engine, name, value)


def reporting_to(reported: list[str], work: Callable[[], None]) -> None:
    """``work()``, with what Hypothesis would print collected into ``reported``
    instead (its reporter is per thread: call this on the thread ``work`` runs on)."""
    with with_reporter(lambda text: reported.append(str(text))):
        work()


def hypothesis_cache() -> Path:
    """storetest's own directory for Hypothesis's caches (its Unicode tables, the
    constants it reads from source files): ``$XDG_CACHE_HOME/storetest/hypothesis``,
    else ``~/.cache/storetest/hypothesis``. Never the working directory."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "storetest" / "hypothesis"


@contextmanager
def hypothesis_home() -> Iterator[None]:
    """While storetest runs, Hypothesis keeps its caches in :func:`hypothesis_cache`,
    not in ``.hypothesis/`` of the working directory, where the caller asked for
    nothing (no example database is used). Shared by every directory, the caches make
    the first run in a new one as fast as the next; what Hypothesis was set to is
    restored afterwards, for the caller's own Hypothesis tests."""
    # The only setter Hypothesis has; its current value is a module global.
    previous = getattr(_configuration, "__hypothesis_home_directory", None)
    _configuration.set_hypothesis_home_dir(hypothesis_cache())
    try:
        yield
    finally:
        _configuration.set_hypothesis_home_dir(previous)


def stopped_shrinking_early(reported: list[str]) -> bool:
    """Whether the time limit, not the step count, ended shrinking."""
    return any("working to shrink" in line for line in reported)


def texts(n: int, label: str) -> list[Message]:
    """``n`` alternating user/assistant messages whose text names ``label`` and the index."""
    return [Message.text("user" if i % 2 == 0 else "assistant", f"{label} #{i}") for i in range(n)]
