"""``storetest check``: run the conformance suite against a store and print the report.

    storetest check                              # the SQLite reference store, on a temp file
    storetest check mypkg.stores:make_store      # a third-party store factory
    storetest check path/to/stores.py:make_store -k "not replica and (steers or save)"
    storetest check mypkg.stores:make_store --replica mypkg.stores:make_replica --report out.md --report out.json

It calls :func:`storetest.check`, the same call every clause test of ``run_conformance``
makes, so the verdicts are the same. Exit status: 0 when every claimed clause passed,
1 when a clause or the factory failed (a call past the deadline, a factory's
``SystemExit`` or ``KeyboardInterrupt`` too, each named as what it is), 4 for a usage
error (a target that cannot be imported, with the error its own code raised), 5 when the
selection ran no clause (none matched ``-k``, or the store claims none of those matched),
as in pytest, and 130 when Ctrl-C interrupted the run (the clause in flight is reported
interrupted, its teardown runs, and the report so far is printed and written).
"""

from __future__ import annotations

import argparse
import atexit
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

# Nothing else is imported here: the rest of storetest (and Hypothesis) loads inside
# main(), where Ctrl-C while it loads is one line and exit status 130, not a traceback.
if TYPE_CHECKING:
    from storetest.results import ClauseResult, Progress, Report

__all__ = ["main", "run"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_CLAUSE, EXIT_INTERRUPTED = 0, 1, 4, 5, 130
_DEFAULT_TARGET = "the SQLite reference store on a temporary file"


def _sqlite(tmp_path: Path) -> Iterator[Any]:
    from reference_stores.sqlite import SQLiteStore

    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


class _Usage(Exception):
    pass


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("storetest")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _resolve(target: str, flag: str) -> Callable[..., Any]:
    """``package.module:factory``, or a file: ``path/to/stores.py:factory``."""
    import importlib

    module, sep, attribute = target.rpartition(":")
    if not sep or not module or not attribute.isidentifier():
        raise _Usage(f"{flag} {target!r} is not of the form package.module:factory or path/to/file.py:factory")
    try:
        loaded = _load_file(module, flag) if module.endswith(".py") or os.sep in module or "/" in module \
            else importlib.import_module(module)
    except ImportError as exc:
        raise _Usage(f"cannot import {module!r} for {flag}: {exc}") from None
    except Exception as exc:  # the target's own code raised while it was imported
        raise _Usage(f"cannot import {module!r} for {flag}: {_own_frames(exc)}") from None
    factory = getattr(loaded, attribute, None)
    if not callable(factory):
        raise _Usage(f"{module!r} has no callable {attribute!r} for {flag}; name a function that "
                     "returns (or yields) a store")
    return factory  # type: ignore[no-any-return]


def _load_file(path: str, flag: str) -> Any:
    """The module in file ``path``, imported as ``python path`` would (its directory
    first on ``sys.path``, so its neighbours import), once however often it is named."""
    import importlib.util

    file = Path(path).resolve()
    if not file.is_file():
        raise _Usage(f"{flag}: no file {path!r} (from {os.getcwd()})")
    name = file.stem
    loaded = sys.modules.get(name)
    known = getattr(loaded, "__file__", None)
    if known and Path(known).resolve() == file:
        return loaded
    if not name.isidentifier():
        raise _Usage(f"{flag}: {file.name!r} cannot be imported as a module (its name is not an identifier)")
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise _Usage(f"{flag}: cannot import {path!r} as a Python module")
    sys.path.insert(0, str(file.parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the store's frames and its dataclasses need it there
    spec.loader.exec_module(module)
    return module


def _reopen(args: argparse.Namespace) -> Callable[..., Any] | None:
    """``--reopen``: an importable function, checked before the run; ``None`` without it."""
    from storetest.runner import check_reopen

    if not args.reopen:
        return None
    if args.target is None:
        raise _Usage("--reopen needs a TARGET too")
    reopen = _resolve(args.reopen, "--reopen")
    try:
        check_reopen(reopen, "--reopen")
    except TypeError as exc:
        raise _Usage(str(exc)) from None
    return reopen


def _own_frames(error: BaseException) -> str:
    """The error and the frames of the target's own code (not importlib's, not storetest's)."""
    import sysconfig
    import traceback

    from storetest._engine.failures import describe_exception, store_frames

    theirs = ("<", str(Path(__file__).parent) + os.sep, sysconfig.get_paths()["stdlib"] + os.sep)
    roots = [f.filename for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(theirs)]
    return store_frames(error, roots) if roots else describe_exception(error)


_TOKEN = re.compile(r"\s*(\(|\)|,|[^\s(),]+)")


def _selected(keyword: str | None) -> list[str] | None:
    """The clauses ``-k`` selects, in pytest's grammar: words matched (ignoring case)
    against the clause's name, joined by ``and``, ``or`` (or ``,``), ``not`` and
    parentheses. Returns every clause when nothing is given; may return none."""
    from storetest.clauses import CLAUSES

    if not keyword:
        return None
    tokens = [t.lower() if t.lower() in ("and", "or", "not") else t for t in _TOKEN.findall(keyword)]
    tokens = ["or" if t == "," else t for t in tokens]
    at = 0

    def peek() -> str | None:
        return tokens[at] if at < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal at
        token = peek()
        if token is None or (expected is not None and token != expected):
            where = f"at {token!r}" if token is not None else "at its end"
            raise _Usage(f"-k {keyword!r}: expected {expected or 'a word'} {where} (a pytest -k expression: "
                         "words joined by and / or / not and parentheses)")
        if expected is None and token in ("and", "or", "not", "(", ")"):
            raise _Usage(f"-k {keyword!r}: expected a word at {token!r}")
        at += 1
        return token

    def either() -> Callable[[str], bool]:
        parts = [both()]
        while peek() == "or":
            take("or")
            parts.append(both())
        return lambda name: any(p(name) for p in parts)

    def both() -> Callable[[str], bool]:
        parts = [negated()]
        while peek() == "and":
            take("and")
            parts.append(negated())
        return lambda name: all(p(name) for p in parts)

    def negated() -> Callable[[str], bool]:
        if peek() == "not":
            take("not")
            inner = negated()
            return lambda name: not inner(name)
        if peek() == "(":
            take("(")
            inner = either()
            take(")")
            return inner
        word = take().lower()
        return lambda name: word in name.lower()

    matches = either()
    if peek() is not None:
        raise _Usage(f"-k {keyword!r}: unexpected {peek()!r} (join words with and / or)")
    return [c.name for c in CLAUSES if matches(c.name)]


def _jobs(given: str | None) -> tuple[int, bool]:
    """How many processes share the clauses (``--jobs``, else ``STORETEST_JOBS``, else
    auto), and whether the user asked for that number."""
    from storetest._engine.workers import ENVIRONMENT, auto_jobs

    where, text = ("--jobs", given) if given is not None else (ENVIRONMENT, os.environ.get(ENVIRONMENT, ""))
    text = text.strip().lower()
    if text in ("", "auto"):
        return auto_jobs(), False
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise _Usage(f"{where} {text!r}: give a number of processes, 1 or more, or auto")
    return jobs, True


def _writable(paths: list[str]) -> None:
    """Refuse, before the run, a report path that cannot be written."""
    from storetest.report import unwritable

    for path in paths:
        problem = unwritable(path)
        if problem:
            raise _Usage(f"--report {path!r}: {problem}")


def _parser() -> argparse.ArgumentParser:
    from storetest._engine.profiles import PROFILES

    parser = argparse.ArgumentParser(
        prog="storetest", description=(__doc__ or "").split("\n\n")[0].replace("``", "")
    )
    parser.add_argument("--version", action="version", version=f"storetest {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "check",
        help="run the conformance suite against a store and print the report",
        description="Run every clause against a store. Exit 0 when every claimed clause passed, "
        "1 when a clause or the factory failed (a call past --call-timeout, a factory's SystemExit or "
        "KeyboardInterrupt too), 4 for a usage error (also a target that cannot be imported), "
        "5 when the selection ran no clause, 130 when interrupted by Ctrl-C (the report so far is "
        "printed and written; Ctrl-C again exits at once).",
    )
    run.add_argument("target", nargs="?",
                     help=f"package.module:factory or path/to/file.py:factory, a callable returning (or "
                     f"yielding) the store; default: {_DEFAULT_TARGET}")
    run.add_argument("--replica", metavar="MODULE:FACTORY", help="a callable giving a second handle on the same data")
    run.add_argument("--reopen", metavar="MODULE:FACTORY",
                     help="a function opening the same data from another process (its parameters named like "
                     "the factory's): runs the crash clauses, which kill a process writing through the store")
    run.add_argument("--name", help="label for the report (default: the store's class name, else the name "
                     "TARGET gives the factory)")
    run.add_argument("--report", metavar="FILE", action="append", default=[],
                     help="also write the report to FILE (.json JSON, .html HTML, else Markdown); "
                     "give it again for more than one")
    run.add_argument("--profile", choices=sorted(PROFILES), default=None,
                     help="effort: fast (default, or STORETEST_PROFILE), ci, thorough (slow)")
    run.add_argument("--idle", type=float, metavar="SECONDS",
                     help="also run data_survives_idle: write, wait SECONDS, read back (expiry)")
    run.add_argument("--seed", type=int, help="seed for generated inputs (a failure prints the one it used)")
    run.add_argument("--nonce", help="with the seed, fixes the session ids (a failure prints it)")
    run.add_argument("-k", dest="keyword", metavar="EXPRESSION",
                     help="only clauses matching the expression, as pytest's -k: words matched against the "
                     "clause name, with and, or (or a comma), not and parentheses")
    run.add_argument("-q", "--quiet", action="store_true", help="no line per clause as it finishes")
    run.add_argument("--jobs", metavar="N",
                     help="processes that share the clauses: a number, or auto (the default, or "
                     "STORETEST_JOBS): 2 where this process may use two CPUs or more; clauses stay in one "
                     "process where sharing is not safe (a factory without tmp_path, or with a database URL, "
                     "a network connection or another thread in this process), which --jobs 2 says")
    run.add_argument("--call-timeout", type=float, metavar="SECONDS",
                     help="seconds one call into the store or a factory may take before it is reported "
                     "stuck and its clause ends (default: the profile's, 60)")
    return parser


@dataclass
class _Known:
    """What the command knows so far, for a Ctrl-C that comes at any point."""

    args: argparse.Namespace | None = None
    #: The run's report, once it returned (Ctrl-C while it is printed or written).
    report: Report | None = None
    #: When the command started (UTC, ISO 8601).
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


def run() -> NoReturn:
    """The ``storetest`` command: :func:`main`, then exit with its status without tearing
    down the interpreter: freeing Hypothesis's and storetest's modules took some 60 ms
    of every run (``benchmarks/check_timeline.py --exit``). The exit handlers still run
    (a store's, coverage's), and where a thread the store left is not a daemon, or the
    output cannot be flushed (a full disk, a closed pipe), the exit is the normal one:
    the thread is waited for, the failed write reported with status 120."""
    code = main()
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if run_exit_handlers is None or others:
        sys.exit(code)
    run_exit_handlers()  # as a normal exit does, first (and only once: they are then cleared)
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except Exception:
        sys.exit(code)
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns its exit status. Ctrl-C at any point (while storetest
    or the target imports, while a report is written) exits 130 too, with one line, not
    a traceback, and every ``--report`` is written with what is known."""
    known = _Known()
    try:
        return _command(argv, known)
    except KeyboardInterrupt:
        return _interrupted(known)


def _interrupted(known: _Known) -> int:
    """Ctrl-C outside a run: one line, and the reports asked for, with what is known (a
    second Ctrl-C exits at once)."""
    import signal

    def again(signum: int, frame: object) -> None:
        os.write(2, b"\nstoretest check: interrupted again: exiting now\n")
        os._exit(EXIT_INTERRUPTED)

    previous = signal.signal(signal.SIGINT, again) if _main_thread() else None
    try:
        args, report = known.args, known.report
        if report is None:
            print("\nstoretest check: interrupted (Ctrl-C) before any clause ran", file=sys.stderr)
        else:
            print(f"\nstoretest check: interrupted (Ctrl-C) after the run ({report.summary()})", file=sys.stderr)
        if args is not None and args.report:
            _write(report or _nothing_ran(args, known), args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return EXIT_INTERRUPTED


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _nothing_ran(args: argparse.Namespace, known: _Known) -> Report:
    """The report of a run Ctrl-C stopped before its first clause: no verdict, and no
    seed or nonce (none was used)."""
    from storetest.results import Report, versions

    target = args.target or _DEFAULT_TARGET
    return Report(name=args.name or _run_name(args), profile=args.profile or os.environ.get("STORETEST_PROFILE")
                  or "fast", seed=args.seed or 0, nonce=args.nonce or "", results=(), target=target,
                  replica=args.replica or "", started=known.started, versions=versions(),
                  interrupted="interrupted (Ctrl-C) before any clause ran")


def _command(argv: list[str] | None, known: _Known) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 else EXIT_USAGE
    known.args = args
    # Everything else loads now (Ctrl-C here is main()'s).
    from storetest._engine.profiles import check_call_timeout
    from storetest._engine.workers import refusal
    from storetest.clauses import CLAUSES
    from storetest.results import SHOWN, Interrupted
    from storetest.runner import SUPPLIED, check, unsupplied, with_reopen_advice, with_replica_advice

    # Importing the target must work from the caller's directory, as `python -m` would.
    sys.path.insert(0, os.getcwd())
    factory: Callable[..., Any]
    replica: Callable[..., Any] | None
    try:
        if args.target is None:
            if args.replica:
                raise _Usage("--replica needs a TARGET too")
            # Both calls get the clause's one tmp_path: two handles on one file.
            factory, replica = _sqlite, _sqlite
        else:
            factory = _resolve(args.target, "TARGET")
            replica = _resolve(args.replica, "--replica") if args.replica else None
        reopen = _reopen(args)
        missing = unsupplied([factory, replica, reopen], {})
        if missing:
            raise _Usage(
                f"the factory's parameter {missing[0]!r} is not something storetest check can supply "
                f"(it supplies {', '.join(SUPPLIED)}): give it a default, or name a factory that "
                f"takes only those (a function of a few lines that calls yours)")
        clauses = _selected(args.keyword)
        jobs, asked = _jobs(args.jobs)
        _writable(args.report)
        try:
            check_call_timeout(args.call_timeout)
        except ValueError as exc:
            raise _Usage(f"--{exc}") from None
    except _Usage as exc:
        print(f"storetest check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if clauses == []:
        print(f"storetest check: -k {args.keyword!r} matches no clause; ran nothing. The clauses are: "
              f"{', '.join(c.name for c in CLAUSES)}", file=sys.stderr)
        return EXIT_NO_CLAUSE

    def progress(state: Progress) -> None:
        if args.quiet:
            return
        if state.result is not None:
            r = state.result
            if r.outcome == "not claimed":
                return  # said once, in the table's "not claimed" line
            print(f"  [{state.index + 1}/{state.total}] {SHOWN[r.outcome]:5} {r.clause} ({r.seconds:.2f}s)",
                  flush=True)
        elif state.elapsed:
            flying = f"; {state.flying()}" if state.in_flight else ""
            print(f"  [{state.index + 1}/{state.total}] ...   {state.clause}: {state.elapsed:.0f}s, "
                  f"{state.examples} examples or rounds done{flying}", flush=True)

    if asked and jobs > 1 and (alone := refusal([factory, replica, reopen], None)):
        print(f"storetest check: every clause runs in this one process: {alone}", file=sys.stderr)
    try:
        report = check(factory, replica, clauses=clauses, profile=args.profile, seed=args.seed,
                       nonce=args.nonce, name=args.name, progress=progress, idle=args.idle, reopen=reopen,
                       call_timeout=args.call_timeout, jobs=jobs)
    except (TypeError, ValueError) as exc:
        print(f"storetest check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as stop:
        # Ctrl-C: the verdicts so far, the clause in flight as interrupted, every report written.
        known.report = _as_typed(with_reopen_advice(with_replica_advice(_with_replays(stop.report, args),
                                                                        "pass --replica MODULE:FACTORY"),
                                                    "pass --reopen MODULE:FACTORY"), args, factory)
        _print(known.report, args)
        print(f"storetest check: {stop.report.interrupted}", file=sys.stderr)
        return EXIT_INTERRUPTED
    report = with_replica_advice(_with_replays(report, args), "pass --replica MODULE:FACTORY")
    report = known.report = _as_typed(with_reopen_advice(report, "pass --reopen MODULE:FACTORY"), args, factory)
    _print(report, args)
    if args.target is None:
        # The first command a reader runs: what to run next.
        print("storetest check: that was the SQLite reference store; to test your own: storetest check "
              "yourmodule:make_store (a function returning your store), --report out.md to write the report "
              "to a file", file=sys.stderr)
    if not report.ran:
        print(f"storetest check: the store claims none of the {len(report.results)} clauses selected; "
              "ran nothing", file=sys.stderr)
        return EXIT_NO_CLAUSE
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_name(args: argparse.Namespace) -> str:
    """The name the author gave the factory on the command line (``sessions`` of
    ``test_sessions.py:sessions``)."""
    return args.target.rpartition(":")[2] if args.target else "SQLiteStore"


def _as_typed(report: Report, args: argparse.Namespace, factory: Callable[..., Any]) -> Report:
    """The report with the target and replica as typed, and, when neither ``--name``
    nor the store's class named the run, the name the target gives the factory."""
    from storetest.runner import default_name

    name = report.name
    if not args.name and args.target and name == default_name(factory):
        name = _run_name(args)
    return replace(report, name=name, target=args.target or _DEFAULT_TARGET, replica=args.replica or "")


def _with_replays(report: Report, args: argparse.Namespace) -> Report:
    """Each failure carries the command that replays it from the author's shell."""
    command = ["storetest", "check", *([args.target] if args.target else [])]
    if args.replica:
        command += ["--replica", args.replica]
    if args.idle is not None:
        command += ["--idle", f"{args.idle:g}"]
    if args.reopen:
        command += ["--reopen", args.reopen]
    results = tuple(
        replace(r, replay=" ".join([*command, *report.replay(r.clause)])) if r.outcome in ("failed", "error")
        else r
        for r in report.results
    )
    return replace(report, results=results)


def _setup_text(failure: ClauseResult) -> str:
    """A set-up error's diagnosis and details, the line they share said once."""
    details = failure.details
    if not details or details == failure.diagnosis:
        return failure.diagnosis
    return details if details.startswith(failure.diagnosis) else f"{failure.diagnosis}\n{details}"


def _print(report: Report, args: argparse.Namespace) -> None:
    from storetest.results import render_text

    for failure in report.failures():
        if failure.setup:
            # Said once: the factory fails before any clause could run.
            print(f"\n{_setup_text(failure)}")
            if report.not_reached:
                n = len(report.not_reached)
                print(f"{n} selected clause{'s' if n != 1 else ''} not reached: the set-up fails before them")
            continue
        print(f"\n{failure.clause}: {failure.outcome}\n{failure.details or failure.diagnosis}")
        print(f"replay: {failure.replay}")
    print()
    print(render_text(report))
    _write(report, args)


def _write(report: Report, args: argparse.Namespace) -> None:
    """Every report ``--report`` asks for."""
    from storetest.report import render

    for path in args.report:
        Path(path).write_text(render([report], path) + "\n", encoding="utf-8")
        print(f"report written to {path}")


if __name__ == "__main__":
    run()
