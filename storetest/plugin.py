"""The pytest plugin: ``run_conformance``, its options and report, and the
throwaway-database fixtures.

Registered through the ``pytest11`` entry point, so installing storetest is enough:
no conftest copying, no star-imports.
"""

from __future__ import annotations

import importlib
import inspect
import os
import random
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as Settings

from storetest import _databases
from storetest._harness import Target, open_target, parameter_names
from storetest.clauses import CLAUSES, NEEDS_REPLICA, conformance_failures
from storetest.report import ClauseResult, render, render_text

__all__ = ["PROFILES", "run_conformance"]

#: Hypothesis profiles, chosen with ``--storetest-profile`` (or ``STORETEST_PROFILE``).
#: ``fast`` is the default; ``thorough`` is opt-in and slow. No deadlines anywhere: a
#: real database's latency is not the store's bug.
PROFILES: dict[str, Settings] = {
    name: Settings(
        max_examples=examples,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    for name, examples in (("fast", 20), ("ci", 40), ("thorough", 400))
}

_SKIP_NO_REPLICA = (
    "needs a second handle on the same data: pass replica=<factory> to run_conformance "
    "(its parameters are fixtures like the factory's; one named 'primary' gets the first store)"
)
_CLAUSE_NAMES = tuple(c.__name__ for c in CLAUSES)


def run_conformance(
    factory: Callable[..., Any],
    *,
    replica: Callable[..., Any] | None = None,
    name: str | None = None,
    skip: Mapping[str, str] | None = None,
) -> type:
    """Add the conformance suite to the calling test module, one test per clause.

    :param factory: makes the store under test, afresh for each clause. A plain or
        async function, or a (async) generator that yields the store and tears it
        down after the ``yield``. Its parameters are pytest fixtures, resolved by name.
        The store's methods may be async (driven by tasks on one event loop, the one
        the factory ran on) or plain (driven from threads).
    :param replica: makes a second handle on the same data, for the replica clauses;
        the same kinds of callable, with fixtures as parameters. A parameter named
        ``primary`` receives the store ``factory`` made. Without it, those clauses are
        skipped with a reason that says so.
    :param name: the label in test ids and in the report (default: the factory's name).
    :param skip: clause names mapped to the reason they cannot run for this store;
        they are reported as skipped with that reason.
    :returns: the test class, also placed in the caller's module so pytest collects it;
        assign it (``TestMyStore = run_conformance(...)``) to choose its name.
    :raises TypeError: ``factory`` or ``replica`` is not callable.
    :raises ValueError: ``skip`` names a clause that does not exist.
    """
    for label, fn in (("factory", factory), ("replica", replica)):
        if fn is not None and not callable(fn):
            raise TypeError(
                f"run_conformance({label}=...) must be a callable that returns a store, "
                f"not {type(fn).__name__}; e.g. run_conformance(lambda: MyStore())"
            )
    skip = dict(skip or {})
    unknown = sorted(set(skip) - set(_CLAUSE_NAMES))
    if unknown:
        raise ValueError(
            f"run_conformance(skip=...) names unknown clauses {unknown}; the clauses are: "
            + ", ".join(_CLAUSE_NAMES)
        )
    if name is None:
        name = getattr(factory, "__name__", "store").strip("_<>") or "store"
        if name == "lambda":
            name = "store"
    cls = _conformance_class(factory, replica, name, skip)
    caller = sys._getframe(1).f_globals
    attribute = cls.__name__
    n = 2
    while attribute in caller:
        attribute = f"{cls.__name__}_{n}"
        n += 1
    cls.__storetest_attribute__ = attribute  # type: ignore[attr-defined]
    caller[attribute] = cls
    return cls


def _conformance_class(
    factory: Callable[..., Any], replica: Callable[..., Any] | None, name: str, skip: dict[str, str]
) -> type:
    names = [*parameter_names(factory), *parameter_names(replica or factory)]
    needed = [p for p in dict.fromkeys(names) if p not in ("request", "primary")]

    def target(self: object, request: pytest.FixtureRequest, **fixtures: Any) -> Iterator[Target]:
        fixtures["request"] = request
        clause = request.node.get_closest_marker("storetest").kwargs["clause"]
        profile = request.config.getoption("storetest_profile") or "fast"
        seed = request.config.getoption("storetest_seed")
        if seed is None:
            seed = random.randrange(2**32)
        request.node.user_properties.append(("storetest_seed", seed))
        with open_target(clause, factory, replica, fixtures, PROFILES[profile], seed) as t:
            yield t

    target.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY),
            *(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in needed),
        ]
    )
    attrs: dict[str, Any] = {
        "__doc__": f"The storetest conformance suite against {name}.",
        "__storetest_run__": name,
        "_storetest_target": pytest.fixture(target, name="_storetest_target"),
    }
    for clause in CLAUSES:
        test = _clause_test(clause)
        test = pytest.mark.storetest(clause=clause.__name__, run=name)(test)
        if clause.__name__ in skip:
            test = pytest.mark.skip(reason=skip[clause.__name__])(test)
        elif clause in NEEDS_REPLICA and replica is None:
            test = pytest.mark.skip(reason=_SKIP_NO_REPLICA)(test)
        attrs[test.__name__] = test
    safe = re.sub(r"\W+", "_", name).strip("_") or "store"
    return type(f"TestConformance_{safe}", (), attrs)


def _clause_test(clause: Callable[[Target], None]) -> Callable[..., None]:
    def test(self: object, _storetest_target: Target) -> None:
        __tracebackhide__ = True
        clause(_storetest_target)

    test.__name__ = f"test_{clause.__name__}"
    test.__qualname__ = test.__name__
    test.__doc__ = clause.__doc__
    return test


# --- pytest hooks ------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("storetest", "storetest conformance suite")
    group.addoption(
        "--storetest-profile",
        choices=sorted(PROFILES),
        default=None,
        help="Hypothesis profile for the clauses: fast (default), ci, or thorough (slow). "
        "Also STORETEST_PROFILE or the storetest_profile ini option.",
    )
    group.addoption(
        "--storetest-seed",
        type=int,
        default=None,
        help="seed for generated inputs and races (a failure prints the one it used)",
    )
    group.addoption(
        "--storetest-report",
        default=None,
        metavar="FILE",
        help="write the conformance report to FILE: JSON if it ends in .json, else Markdown",
    )
    parser.addini("storetest_profile", "default Hypothesis profile for storetest clauses")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "storetest(clause, run): a storetest conformance clause (added by run_conformance)"
    )
    profile = (
        config.getoption("storetest_profile")
        or os.environ.get("STORETEST_PROFILE")
        or config.getini("storetest_profile")
        or "fast"
    )
    if profile not in PROFILES:
        raise pytest.UsageError(
            f"unknown storetest profile {profile!r}; choose one of {', '.join(sorted(PROFILES))}"
        )
    config.option.storetest_profile = profile
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_ConformanceReport(config), "storetest-report")


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    # run_conformance puts its class in the module; when the author also assigned it to a
    # name of their own, collect it under that name only.
    attribute = getattr(obj, "__storetest_attribute__", None)
    if attribute is None or name != attribute or not isinstance(collector, pytest.Module):
        return None
    if any(value is obj and key != name for key, value in vars(collector.obj).items()):
        return []
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome = yield
    marker = item.get_closest_marker("storetest")
    if marker is None:
        return
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    report.user_properties.append(("storetest_clause", marker.kwargs["clause"]))
    report.user_properties.append(("storetest_run", marker.kwargs["run"]))
    if report.failed and call.excinfo is not None:
        error = call.excinfo.value
        report.user_properties.append(("storetest_diagnosis", _diagnosis(error)))
        seed = dict(item.user_properties).get("storetest_seed")
        if report.when == "call":
            failures = conformance_failures(error)
            if failures:
                # The clause's own message says everything; the harness traceback does not.
                report.longrepr = "\n".join(
                    [str(f) for f in failures] + [*getattr(error, "__notes__", [])]
                )
            if seed is not None:
                report.sections.append((
                    "storetest: reproduce",
                    f"pytest '{item.nodeid}' --storetest-seed={seed}"
                    f" --storetest-profile={item.config.getoption('storetest_profile')}",
                ))


def _diagnosis(error: BaseException) -> str:
    failures = conformance_failures(error)
    if failures:
        return failures[0].diagnosis
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"the store raised {type(error).__name__}: {first}"[:300]


class _ConformanceReport:
    """Collects one row per clause (in the controller under xdist) and prints the table."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: dict[str, ClauseResult] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if "storetest_clause" not in props:
            return
        if report.when == "call" or not report.passed:
            self.results[report.nodeid] = self._row(report, props)

    @staticmethod
    def _row(report: pytest.TestReport, props: dict[str, Any]) -> ClauseResult:
        if report.skipped:
            outcome = "skipped"
            longrepr = report.longrepr
            diagnosis = longrepr[2].removeprefix("Skipped: ") if isinstance(longrepr, tuple) else ""
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
            diagnosis = str(props.get("storetest_diagnosis", "failed"))
            if report.when != "call":
                diagnosis = f"{report.when}: {diagnosis}"
        else:
            outcome, diagnosis = "passed", ""
        return ClauseResult(
            run=str(props["storetest_run"]),
            clause=str(props["storetest_clause"]),
            outcome=outcome,
            diagnosis=diagnosis,
            nodeid=report.nodeid,
            seconds=round(report.duration, 3),
            seed=props.get("storetest_seed"),
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.results:
            return
        results = list(self.results.values())
        profile = self.config.getoption("storetest_profile")
        terminalreporter.section(f"storetest conformance (profile {profile})")
        terminalreporter.line(render_text(results, width=terminalreporter._tw.fullwidth))
        path = self.config.getoption("storetest_report")
        if path:
            Path(path).write_text(render(results, path, profile=profile) + "\n", encoding="utf-8")
            terminalreporter.line(f"report written to {path}")


def _shared_dir(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    # xdist gives each worker <run basetemp>/popen-gwN; the run's own basetemp is shared.
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def _provide(backend: str, request: pytest.FixtureRequest) -> Iterator[str]:
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    run = _databases.TestRun(
        private_dir=factory.mktemp(f"storetest-{backend}"),
        shared_dir=_shared_dir(factory, request.config),
    )
    module = importlib.import_module(f"storetest._databases.{backend}")
    provision = module.provision(run)
    try:
        url = next(provision)
    except _databases.Unavailable as exc:
        if backend in _databases.required_backends():
            pytest.fail(
                f"{backend} is required (STORETEST_REQUIRE) but unavailable: {exc}", pytrace=False
            )
        pytest.skip(f"no {backend} database: {exc}")
    yield url
    # Run the provisioner's cleanup (drop the database, stop the container).
    next(provision, None)


@pytest.fixture(scope="session")
def storetest_postgres_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a throwaway PostgreSQL database for this test run (dropped afterwards)."""
    yield from _provide("postgres", request)


@pytest.fixture(scope="session")
def storetest_mysql_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a throwaway MySQL/MariaDB database for this test run (dropped afterwards)."""
    yield from _provide("mysql", request)


@pytest.fixture(scope="session")
def storetest_mongodb_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a throwaway MongoDB database for this test run (dropped afterwards)."""
    yield from _provide("mongodb", request)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return  # the controller stops shared servers once every worker is done
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return
    for problem in _databases.stop_local_servers(factory.getbasetemp()):
        config.issue_config_time_warning(pytest.PytestWarning(problem), stacklevel=2)
