"""The pytest plugin: ``run_conformance``, its options and report, and the
throwaway-database fixtures.

Registered through the ``pytest11`` entry point, so installing storetest is enough:
no conftest copying, no star-imports. Each clause test calls :func:`storetest.check`
for its one clause, so a pytest run and ``storetest check`` give the same verdicts.
"""

from __future__ import annotations

import hashlib
import random
import re
import shlex
import signal
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from storetest._engine import forking, servers, stops
from storetest._engine.failures import Violation
from storetest._engine.harness import CAPABILITIES, declared_capabilities, new_nonce
from storetest._engine.profiles import PROFILES, check_call_timeout, check_idle, profile_named
from storetest._engine.stops import INTERRUPTED_STATUS
from storetest.clauses import CLAUSES
from storetest.report import render, unwritable
from storetest.results import ClauseResult, Interrupted, Progress, Report, interrupted_line, not_claimed, render_text
from storetest.runner import check, check_reopen, default_name, with_reopen_advice, with_replica_advice

__all__ = ["run_conformance"]

_RESULT = "storetest_result"


@dataclass(frozen=True)
class _Spec:
    factory: Callable[..., Any]
    replica: Callable[..., Any] | None
    name: str
    skip: dict[str, str]
    #: What the factory says its stores claim (its class or return annotation), or None.
    declared: frozenset[str] | None = None
    #: The clauses left out of the class because the declared store does not claim them.
    unclaimed: tuple[ClauseResult, ...] = ()
    #: Opens the same data from another process, for the crash clauses.
    reopen: Callable[..., Any] | None = None
    #: Whether ``name`` was given (else the store's class names the run in the report).
    named: bool = False
    #: The factory and the replica given, as ``module:name`` (the names the test module
    #: gives them), for the report.
    target: str = ""
    replica_target: str = ""


#: Classes made by run_conformance, with the line that made them, by the globals of the
#: module that made them (kept alive here so the id is not reused); collected by
#: pytest_make_collect_report below when the module did not assign them itself.
_MADE: dict[int, tuple[dict[str, Any], list[tuple[int, type]]]] = {}


def run_conformance(
    factory: Callable[..., Any],
    *,
    replica: Callable[..., Any] | None = None,
    name: str | None = None,
    skip: Mapping[str, str] | None = None,
    reopen: Callable[..., Any] | None = None,
) -> type:
    """Add the conformance suite to the calling test module, one test per clause.

    :param factory: makes the store under test, afresh for each clause. A plain or
        async function, or a (async) generator that yields the store and tears it
        down after the ``yield``. Its parameters are pytest fixtures, resolved by name.
        The store's methods may be async (driven by tasks on one event loop, the one
        the factory ran on) or plain (driven from threads). A class, or a factory
        whose return annotation names the store's class (``-> MyStore``,
        ``-> Iterator[MyStore]``), says what its stores claim without being called:
        the clauses they do not claim are then not collected, and the report names
        them in one line.
    :param replica: makes a second handle on the same data, for the replica clauses;
        the same kinds of callable, with fixtures as parameters. A parameter named
        ``primary`` receives the store ``factory`` made. Without it, those clauses are
        skipped with a reason that says so.
    :param name: the label in test ids and in the report (default: the factory's name).
    :param skip: clause names mapped to the reason they cannot run for this store;
        they are reported as skipped with that reason.
    :param reopen: opens the data the factory's store wrote, as a new handle, from any
        process, for the crash clauses (a child process writing through it is killed,
        then the data is reopened and checked): any callable (a function at the top level
        of an importable module where children are spawned, see docs/performance.md)
        whose parameters are named like the factory's and get the same values
        (``tmp_path``, a database URL), often the factory itself. Without it, those
        clauses are skipped with a reason that says so.
    :returns: the test class. Unassigned, it is collected as ``TestConformance_<name>``;
        assign it (``TestMyStore = run_conformance(...)``) to choose its name.
    :raises TypeError: ``factory`` or ``replica`` is not callable, or children are
        spawned and ``reopen`` is not importable by one (a lambda, a nested function).
    :raises ValueError: ``skip`` names a clause that does not exist.
    """
    for label, fn in (("factory", factory), ("replica", replica)):
        if fn is not None and not callable(fn):
            raise TypeError(
                f"run_conformance({label}=...) must be a callable that returns a store, "
                f"not {type(fn).__name__}; e.g. run_conformance(lambda: MyStore())"
            )
    check_reopen(reopen, "run_conformance(reopen=...)")
    skip = dict(skip or {})
    names = [c.name for c in CLAUSES]
    unknown = sorted(set(skip) - set(names))
    if unknown:
        raise ValueError(
            f"run_conformance(skip=...) names unknown clauses {unknown}; the clauses are: " + ", ".join(names)
        )
    caller = sys._getframe(1)
    named = name is not None
    if name is None:
        # The factory's name; a lambda's, the name the module gives it (``sessions = item_sessions(...)``).
        name = default_name(factory)
        if name == "store":
            name = _bound_name(factory, caller.f_globals) or name
    declared = declared_capabilities(factory)
    unclaimed = () if declared is None else tuple(
        not_claimed(c.name, c.needs - declared, CAPABILITIES, promise=c.promise, topic=c.topic,
                    exists_for=c.exists_for)
        for c in CLAUSES if c.needs - declared)
    module = caller.f_globals.get("__name__", "?")
    cls = _conformance_class(_Spec(factory, replica, name, skip, declared, unclaimed, reopen, named,
                                   _where(factory, module, caller.f_globals),
                                   _where(replica, module, caller.f_globals) if replica is not None else ""))
    made = _MADE.setdefault(id(caller.f_globals), (caller.f_globals, []))[1]
    taken = {c.__name__ for _, c in made}
    base, n = cls.__name__, 2
    while cls.__name__ in taken:
        cls.__name__ = cls.__qualname__ = f"{base}_{n}"
        n += 1
    made.append((caller.f_lineno, cls))
    return cls


def _bound_name(fn: object, namespace: Mapping[str, Any]) -> str | None:
    """The name ``namespace`` (a test module's globals) binds to ``fn``, if one does."""
    return next((key for key, value in namespace.items() if value is fn and not key.startswith("_")), None)


def _where(fn: Callable[..., Any], module: str, namespace: Mapping[str, Any]) -> str:
    """``module:name`` for a factory: by the name the test module binds it to, else its own."""
    bound = _bound_name(fn, namespace)
    if bound is not None:
        return f"{module}:{bound}"
    return f"{getattr(fn, '__module__', module)}:{getattr(fn, '__qualname__', repr(fn))}"


def _conformance_class(spec: _Spec) -> type:
    attrs: dict[str, Any] = {
        "__doc__": f"The storetest conformance suite against {spec.name}.",
        "__storetest_spec__": spec,
    }
    left_out = {r.clause for r in spec.unclaimed}
    for clause in CLAUSES:
        if clause.name in left_out:
            continue  # not a test at all: the report gives them one line
        test = _clause_test(clause.name, clause.doc)
        attrs[test.__name__] = pytest.mark.storetest(clause=clause.name, run=spec.name)(test)
    safe = re.sub(r"\W+", "_", spec.name).strip("_") or "store"
    return type(f"TestConformance_{safe}", (), attrs)


def _clause_test(clause: str, doc: str) -> Callable[..., None]:
    def test(self: Any, request: pytest.FixtureRequest) -> None:
        __tracebackhide__ = True
        _run_clause(self.__storetest_spec__, clause, request)

    test.__name__ = test.__qualname__ = f"test_{clause}"
    test.__doc__ = doc
    return test


def _run_clause(spec: _Spec, clause: str, request: pytest.FixtureRequest) -> None:
    __tracebackhide__ = True
    config = request.config
    seed, nonce = config.stash[_RUN_KEY]
    stopped = config.stash.setdefault(_STOPPED_KEY, {})
    if spec.name in stopped:
        # The factory already failed for this run: said once, in that test.
        pytest.skip(f"not run: {stopped[spec.name]}")
    # Two runs in one session (two stores on one database) must not share session ids.
    run_nonce = nonce + hashlib.blake2s(spec.name.encode(), digest_size=2).hexdigest()
    try:
        report = check(
            spec.factory, spec.replica, clauses=[clause], profile=config.option.storetest_profile,
            seed=seed, nonce=run_nonce, name=spec.name if spec.named else None, skip=spec.skip,
            fixtures=request.getfixturevalue,
            progress=_progress_line(config), idle=config.option.storetest_idle, reopen=spec.reopen,
            call_timeout=config.option.storetest_call_timeout,
        )
    except Interrupted as stop:
        # Ctrl-C: pytest gets its KeyboardInterrupt and stops; the clause's row (interrupted,
        # never an error of the store) goes straight to the table, as no report is logged.
        stop.report = _as_given(stop.report, spec, nonce)
        (result,) = stop.report.results
        collector = config.pluginmanager.get_plugin("storetest-report")
        if isinstance(collector, _ConformanceReport):
            collector.rows[request.node.nodeid] = _row(stop.report, result, request.node.nodeid, spec)
        raise KeyboardInterrupt(f"storetest: Ctrl-C while {clause} ran (its teardown has run)") from None
    # The test file's absolute path: the line works from any directory, not only the rootdir.
    node = request.node
    where = f"{node.path}::{node.nodeid.split('::', 1)[1]}" if "::" in node.nodeid else str(node.path)
    replay = (f"pytest {shlex.quote(where)} --storetest-seed={seed} "
              f"--storetest-nonce={nonce} --storetest-profile={report.profile}"
              + (f" --storetest-idle={config.option.storetest_idle:g}" if config.option.storetest_idle else ""))
    report = with_replica_advice(_as_given(report, spec, nonce), "pass replica=<factory> to run_conformance")
    report = with_reopen_advice(report, "pass reopen=<factory> to run_conformance")
    (result,) = report.results
    if result.outcome in ("failed", "error"):
        result = replace(result, replay=replay)
    request.node.user_properties.append((_RESULT, _row(report, result, request.node.nodeid, spec)))
    more = spec.declared is not None and set(report.capabilities) - spec.declared
    if more:
        pytest.fail(f"the store claims {', '.join(sorted(more))} (it has the methods), but the factory's "
                    f"class or return annotation does not, so those clauses were not collected: annotate "
                    f"the factory with the store's own class", pytrace=False)
    # A binding that declared what it lacks could not say so before opening a store: no annotation helps.
    known = result.lacks and spec.declared is not None and set(result.lacks) <= spec.declared
    if result.outcome in ("skipped", "not claimed"):
        pytest.skip(result.diagnosis if result.outcome == "skipped" else
                    f"not claimed: {result.diagnosis}" if known else
                    f"not claimed: {result.diagnosis}; annotate the factory's return type with the store's "
                    "class (or pass the class) and clauses it does not claim are not collected")
    if result.setup:
        stopped[spec.name] = f"the factory failed in {request.node.nodeid}: {result.diagnosis}"
        said = (result.details if result.details.startswith(result.diagnosis)
                else "\n".join(filter(None, [result.diagnosis, result.details])))
        pytest.fail("\n".join([said, "", "the other clauses of this run are not run: the factory fails before them"]),
                    pytrace=False)
    if result.outcome in ("failed", "error"):
        pytest.fail("\n".join([result.details or result.diagnosis, "", f"replay: {replay}"]), pytrace=False)


def _as_given(report: Report, spec: _Spec, nonce: str) -> Report:
    """The report as the test module gave the run: its name (when given, or when the
    store's class did not name it), its factories by the names the module gives them,
    and the session's nonce, the one ``--storetest-nonce`` takes (each run's session ids
    add a suffix of their own, so that two runs on one database stay apart)."""
    name = report.name if not spec.named and report.name != default_name(spec.factory) else spec.name
    return replace(report, name=name, target=spec.target, replica=spec.replica_target, nonce=nonce)


def _progress_line(config: pytest.Config) -> Callable[[Progress], None] | None:
    """Under -v, and not in an xdist worker, a line every few seconds of a long clause."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if config.option.verbose <= 0 or reporter is None or hasattr(config, "workerinput"):
        return None

    def line(state: Progress) -> None:
        if state.result is None and state.elapsed:
            flying = f"; {state.flying()}" if state.in_flight else ""
            reporter.write_line(f"    storetest: {state.clause}: {state.elapsed:.0f}s, "
                                f"{state.examples} examples or rounds done{flying}")

    return line


def _row(report: Report, result: ClauseResult, nodeid: str, spec: _Spec) -> dict[str, Any]:
    """What the controller needs to rebuild the report (plain data: xdist sends it)."""
    return {"run": spec.name, "name": report.name, "profile": report.profile, "seed": report.seed,
            "nonce": report.nonce,
            "capabilities": list(report.capabilities), "partial": dict(report.partial), "nodeid": nodeid,
            "target": report.target, "replica": report.replica, "started": report.started,
            "versions": dict(report.versions), "result": asdict(result),
            "unclaimed": [asdict(r) for r in spec.unclaimed]}


def _result(data: Mapping[str, Any]) -> ClauseResult:
    """A :class:`ClauseResult` back from :func:`dataclasses.asdict`."""
    tuples = {k: tuple(data.get(k, ())) for k in ("story", "remarks", "lacks")}
    return ClauseResult(**{**data, **tuples, "violations": tuple(Violation(**v) for v in data["violations"])})


# --- pytest hooks ------------------------------------------------------------------------

_RUN_KEY = pytest.StashKey[tuple[int, str]]()
_STOPPED_KEY = pytest.StashKey[dict[str, str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("storetest", "storetest conformance suite")
    group.addoption(
        "--storetest-profile",
        choices=sorted(PROFILES),
        default=None,
        help="effort per clause: fast (default), ci, or thorough (slow). "
        "Also STORETEST_PROFILE or the storetest_profile ini option.",
    )
    group.addoption(
        "--storetest-seed",
        type=int,
        default=None,
        help="seed for generated inputs (a failure prints the one it used)",
    )
    group.addoption(
        "--storetest-nonce",
        default=None,
        help="with the seed, fixes the session ids of a run (a failure prints it)",
    )
    group.addoption(
        "--storetest-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="run data_survives_idle: write, wait SECONDS, read back (the suite cannot see expiry "
        "otherwise; off by default)",
    )
    group.addoption(
        "--storetest-report",
        action="append",
        default=[],
        metavar="FILE",
        help="write the conformance report to FILE: JSON if it ends in .json, one HTML file if in .html, "
        "else Markdown; give it again for more than one",
    )
    group.addoption(
        "--storetest-call-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds one call into the store or a factory may take before it is reported stuck and "
        "its clause ends (default: the profile's, 60)",
    )
    parser.addini("storetest_profile", "default effort profile for storetest clauses")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "storetest(clause, run): a storetest conformance clause (added by run_conformance)"
    )
    try:
        profile = profile_named(config.getoption("storetest_profile") or config.getini("storetest_profile")
                                or None)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.option.storetest_profile = profile.name
    for path in config.getoption("storetest_report"):
        problem = unwritable(path)
        if problem:
            raise pytest.UsageError(f"--storetest-report {path!r}: {problem}")
    try:
        check_idle(config.getoption("storetest_idle"))
        check_call_timeout(config.getoption("storetest_call_timeout"))
    except ValueError as exc:
        raise pytest.UsageError(f"--storetest-{exc}") from None
    seed = config.getoption("storetest_seed")
    config.stash[_RUN_KEY] = (
        random.randrange(2**32) if seed is None else seed,
        config.getoption("storetest_nonce") or new_nonce(),
    )
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_ConformanceReport(config), "storetest-report")
    _CONFIGS.append(config)
    # A second Ctrl-C exits at once: its lines go to the terminal, not to pytest's capture.
    capturing = getattr(config.pluginmanager.get_plugin("capturemanager"), "_global_capturing", None)
    saved = getattr(getattr(capturing, "err", None), "targetfd_save", None)
    config.stash[_FD_KEY] = stops.messages_fd
    if isinstance(saved, int):
        stops.messages_fd = saved


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # The fork server for the process and crash clauses collected here (each xdist
    # worker collects its own): forked now, when every factory exists and no clause ran.
    forked = {c.name for c in CLAUSES if c.processes or c.reopen}
    specs = {id(spec): spec for item in session.items
             if (mark := item.get_closest_marker("storetest")) and mark.kwargs.get("clause") in forked
             and (spec := getattr(getattr(item, "cls", None), "__storetest_spec__", None)) is not None}
    server = forking.start_shared(o for spec in specs.values() for o in (spec.factory, spec.reopen))
    if server is not None:
        session.config.add_cleanup(lambda: forking.stop_shared(server))


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport, Any]:
    report = yield
    # A class run_conformance made in this module and the module did not assign to a
    # name of its own: collect it here (an assigned one pytest collects by itself).
    if isinstance(collector, pytest.Module) and report.passed:
        namespace = vars(collector.obj)
        _, made = _MADE.pop(id(namespace), (None, []))
        assigned = {id(v) for v in namespace.values()}
        for line, cls in made:
            if id(cls) in assigned:
                continue
            node = pytest.Class.from_parent(collector, name=cls.__name__)
            node.obj = cls
            # Where the call stands in the file, so tests after it still run after it.
            at = next((i for i, n in enumerate(report.result) if _line(n) >= line), len(report.result))
            report.result.insert(at, node)
    return report


def _line(node: pytest.Item | pytest.Collector) -> int:
    info = node.reportinfo() if isinstance(node, (pytest.Item, pytest.Class, pytest.Function)) else None
    return int(info[1]) if info and info[1] is not None else 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    marker = item.get_closest_marker("storetest")
    if marker is not None:
        # So a failure outside the clause (a fixture, a teardown) lands in its run's row.
        report.user_properties.append(("storetest_run", marker.kwargs["run"]))
    return report


class _ConformanceReport:
    """Collects one row per clause (in the controller under xdist) and prints the table."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: dict[str, dict[str, Any]] = {}
        #: The clauses whose tests were collected (and not deselected), by run; whether
        #: Ctrl-C stopped the session.
        self.collected: dict[str, set[str]] = {}
        self.interrupted = False

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            marker = item.get_closest_marker("storetest")
            if marker is not None:
                self.collected.setdefault(marker.kwargs["run"], set()).add(marker.kwargs["clause"])

    def pytest_keyboard_interrupt(self) -> None:
        self.interrupted = True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # An interrupted conformance run exits 130, as `storetest check` does (pytest's own is 2).
        if self.interrupted and self.collected:
            session.exitstatus = INTERRUPTED_STATUS

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == _RESULT and isinstance(value, dict):
                self.rows[report.nodeid] = value
        if report.failed and report.when != "call" and report.nodeid not in self.rows:
            self._setup_failure(report)

    def _setup_failure(self, report: pytest.TestReport) -> None:
        # A fixture failed before the clause ran (e.g. a required database is missing).
        run = dict(report.user_properties).get("storetest_run")
        if run is None:
            return
        name = report.nodeid.rsplit("::test_", 1)[-1]
        text = str(report.longrepr).strip().splitlines()
        seed, nonce = self.config.stash[_RUN_KEY]
        result = ClauseResult(name, "error", f"{report.when}: {text[-1] if text else 'failed'}"[:300])
        self.rows[report.nodeid] = {"run": run, "profile": self.config.option.storetest_profile,
                                    "seed": seed, "nonce": nonce, "capabilities": [],
                                    "nodeid": report.nodeid, "result": asdict(result)}

    def reports(self) -> list[Report]:
        order = {c.name: i for i, c in enumerate(CLAUSES)}
        runs: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows.values():
            runs.setdefault(row["run"], []).append(row)
        out = []
        for run, rows in runs.items():
            unclaimed = {u["clause"]: _result(u) for r in rows for u in r.get("unclaimed", ())}
            ran_rows = {r["result"]["clause"]: _result(r["result"]) for r in rows}
            capabilities = tuple(sorted({c for r in rows for c in r["capabilities"]}))
            collected = self.collected.get(run, set(ran_rows))
            if len(collected) < len(CLAUSES) - len(unclaimed):
                # A selection left some of the run's tests out: the clauses its store does not
                # claim (no tests) are kept only where its -k would have kept their tests.
                kept = _keyword_keeps(self.config)
                unclaimed = {name: r for name, r in unclaimed.items() if kept(name, rows[0]["nodeid"])}
            # Collected and not run (Ctrl-C, -x): not claimed when what the store claims says so.
            for c in CLAUSES:
                if c.name in collected and c.name not in ran_rows and capabilities and c.needs - set(capabilities):
                    unclaimed[c.name] = not_claimed(c.name, c.needs - set(capabilities), CAPABILITIES,
                                                    promise=c.promise, topic=c.topic, exists_for=c.exists_for)
            results = tuple(sorted({**unclaimed, **ran_rows}.values(),
                                   key=lambda r: order.get(r.clause, len(order))))
            ran = {r.clause for r in results}
            deselected = tuple(c.name for c in CLAUSES if c.name not in ran and c.name not in collected)
            not_reached = [c.name for c in CLAUSES if c.name not in ran and c.name in collected]
            first = rows[0]
            stop = (interrupted_line(Counter(r.outcome for r in results), len(not_reached))
                    if self.interrupted else "")
            out.append(Report(
                name=next((r["name"] for r in rows if r.get("name")), run), profile=first["profile"],
                seed=first["seed"], nonce=first["nonce"], results=results, capabilities=capabilities,
                partial=first.get("partial", {}),
                not_run=(*deselected, *not_reached), deselected=deselected,
                target=first.get("target", ""), replica=first.get("replica", ""),
                started=min(r.get("started", "") for r in rows), versions=first.get("versions", {}),
                interrupted=stop, stopped=next((r.diagnosis for r in results if r.setup), ""),
            ))
        # Two runs of one store class (two factories) keep their own names apart.
        shown = Counter(r.name for r in out)
        return [replace(r, name=f"{r.name} ({run})") if shown[r.name] > 1 and r.name != run else r
                for r, run in zip(out, runs, strict=True)]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        reports = self.reports()
        if not reports:
            return
        profile = self.config.option.storetest_profile
        terminalreporter.section(f"storetest conformance (profile {profile})")
        for report in reports:
            terminalreporter.line(render_text(report, width=terminalreporter._tw.fullwidth))
        for path in self.config.getoption("storetest_report"):
            Path(path).write_text(render(reports, path) + "\n", encoding="utf-8")
            terminalreporter.line(f"report written to {path}")


def _keyword_keeps(config: pytest.Config) -> Callable[[str, str], bool]:
    """Whether the session's selection would have kept the test of a clause that has none
    (its store does not claim it), named as its run's tests are: by ``-k``, read as pytest
    reads it against the test's name, its class's and its module's. Any other selection
    (``-m``, test ids, a ``-k`` this cannot read) keeps none."""
    keyword = config.getoption("keyword", "")
    try:
        from _pytest.mark.expression import Expression

        expression = Expression.compile(keyword) if keyword else None
    except Exception:  # pytest's own module moved, or an expression it refused
        expression = None
    if expression is None or config.getoption("markexpr", ""):
        return lambda clause, nodeid: False

    def keeps(clause: str, nodeid: str) -> bool:
        names = [f"test_{clause}", *nodeid.split("::")[:-1], *Path(nodeid.split("::")[0]).parts]

        def matches(sub: str, /, **_: object) -> bool:
            return any(sub.lower() in n.lower() for n in names)

        return expression.evaluate(matches)

    return keeps


def _shared_dir(tmp_path_factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    # xdist gives each worker <run basetemp>/popen-gwN; the run's own basetemp is shared.
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def _provide(backend: str, request: pytest.FixtureRequest, prefix: str | None = None) -> Iterator[str]:
    from storetest import databases

    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    provision = databases.provision(
        backend, factory.mktemp(f"storetest-{backend}"), _shared_dir(factory, request.config), prefix=prefix
    )
    try:
        url = next(provision)
    except databases.Unavailable as exc:
        if backend in databases.required_backends():
            pytest.fail(f"{backend} is required (STORETEST_REQUIRE) but unavailable: {exc}", pytrace=False)
        pytest.skip(f"no {backend} database: {exc}")
    yield url
    # Run the provisioner's cleanup (drop the database, stop the container). A server
    # gone already (stopped by hand, killed) has nothing left to clean: a warning, not
    # a traceback that hides the run's table.
    try:
        next(provision, None)
    except Exception as exc:
        warnings.warn(pytest.PytestWarning(f"storetest: could not clean up the throwaway {backend} database "
                                           f"({type(exc).__name__}: {exc})"), stacklevel=1)


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


@pytest.fixture(scope="session")
def storetest_redis_prefix() -> str:
    """The key prefix this test run (each xdist worker) writes under, on the throwaway
    Redis server and cluster alike; its keys are deleted afterwards."""
    from storetest.databases import new_prefix

    return new_prefix()


@pytest.fixture(scope="session")
def storetest_redis_url(request: pytest.FixtureRequest, storetest_redis_prefix: str) -> Iterator[str]:
    """URL of a throwaway Redis server for this test run: write only keys under
    ``storetest_redis_prefix`` (deleted afterwards)."""
    yield from _provide("redis", request, storetest_redis_prefix)


@pytest.fixture(scope="session")
def storetest_redis_cluster_url(request: pytest.FixtureRequest, storetest_redis_prefix: str) -> Iterator[str]:
    """URL of a node of a throwaway Redis Cluster for this test run: write only keys
    under ``storetest_redis_prefix`` (deleted afterwards)."""
    yield from _provide("redis-cluster", request, storetest_redis_prefix)


_SIGINT_KEY = pytest.StashKey[Any]()
_FD_KEY = pytest.StashKey[int]()


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """After the first Ctrl-C pytest tears down (the fixtures, the throwaway servers); a
    second one exits at once, as under ``storetest check``, stopping the servers this
    process started first (or naming those it left, with their pids)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def again(signum: int, frame: object) -> None:
        stops.exit_now("interrupted again: exiting now, without teardown")

    previous = signal.signal(signal.SIGINT, again)
    if _CONFIGS:
        _CONFIGS[-1].stash.setdefault(_SIGINT_KEY, previous)


#: The configs of the pytest sessions running in this process (pytester nests them).
_CONFIGS: list[pytest.Config] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    if _FD_KEY in config.stash:
        stops.messages_fd = config.stash[_FD_KEY]
    if _SIGINT_KEY in config.stash:
        signal.signal(signal.SIGINT, config.stash[_SIGINT_KEY])
    if config in _CONFIGS:
        _CONFIGS.remove(config)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # Last: after pytest's own runner has torn the session's fixtures down (after Ctrl-C
    # it does so here), so their cleanup finds the servers still up.
    config = session.config
    if hasattr(config, "workerinput"):
        return  # the controller stops shared servers once every worker is done
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return
    for problem in servers.stop_local_servers(factory.getbasetemp()):
        config.issue_config_time_warning(pytest.PytestWarning(problem), stacklevel=2)
