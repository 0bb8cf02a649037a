"""``storetest check``: run the conformance suite against a store and print the report.

    storetest check                              # the SQLite reference store, on a temp file
    storetest check mypkg.stores:make_store      # a third-party store factory
    storetest check mypkg.stores:make_store --replica mypkg.stores:make_replica --report out.md

It calls :func:`storetest.check`, the same call every clause test of ``run_conformance``
makes, so the verdicts are the same. Exit status: 0 when every claimed clause passed,
1 when a clause or the factory failed, 4 for a usage error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from storetest.clauses import CLAUSES
from storetest.profiles import PROFILES
from storetest.report import SHOWN, render, render_text
from storetest.runner import Progress, Report, check

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 4
_DEFAULT_TARGET = "the SQLite reference store on a temporary file"


def _sqlite(tmp_path: Path) -> Iterator[Any]:
    from reference_stores.sqlite import SQLiteStore

    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


class _Usage(Exception):
    pass


def _resolve(target: str, flag: str) -> Callable[..., Any]:
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute.isidentifier():
        raise _Usage(f"{flag} {target!r} is not of the form package.module:factory")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise _Usage(f"cannot import {module!r} for {flag}: {exc}") from None
    factory = getattr(loaded, attribute, None)
    if not callable(factory):
        raise _Usage(f"{module!r} has no callable {attribute!r} for {flag}; name a function that "
                     "returns (or yields) a store")
    return factory  # type: ignore[no-any-return]


def _selected(keyword: str | None) -> list[str] | None:
    if not keyword:
        return None
    words = [w.strip() for part in keyword.split(",") for w in part.split(" or ") if w.strip()]
    chosen = [c.name for c in CLAUSES if any(w in c.name for w in words)]
    if not chosen:
        raise _Usage(f"-k {keyword!r} matches no clause; the clauses are: {', '.join(c.name for c in CLAUSES)}")
    return chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="storetest", description=(__doc__ or "").split("\n\n")[0].replace("``", "")
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "check",
        help="run the conformance suite against a store and print the report",
        description="Run every clause against a store. Exit 0 when every claimed clause passed, "
        "1 when a clause or the factory failed, 4 for a usage error.",
    )
    run.add_argument("target", nargs="?",
                     help=f"package.module:factory, a callable returning (or yielding) the store; "
                     f"default: {_DEFAULT_TARGET}")
    run.add_argument("--replica", metavar="MODULE:FACTORY", help="a callable giving a second handle on the same data")
    run.add_argument("--name", help="label for the report (default: the factory's name)")
    run.add_argument("--report", metavar="FILE",
                     help="also write the report to FILE (.json JSON, .html HTML, else Markdown)")
    run.add_argument("--profile", choices=sorted(PROFILES), default=None,
                     help="effort: fast (default, or STORETEST_PROFILE), ci, thorough (slow)")
    run.add_argument("--seed", type=int, help="seed for generated inputs (a failure prints the one it used)")
    run.add_argument("--nonce", help="with the seed, fixes the session ids (a failure prints it)")
    run.add_argument("-k", dest="keyword", metavar="NAMES",
                     help="only clauses whose name contains one of these words (separated by commas or ' or ')")
    run.add_argument("-q", "--quiet", action="store_true", help="no line per clause as it finishes")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_OK if exc.code == 0 else EXIT_USAGE
    # Importing the target must work from the caller's directory, as `python -m` would.
    sys.path.insert(0, os.getcwd())
    factory: Callable[..., Any]
    replica: Callable[..., Any] | None
    try:
        if args.target is None:
            if args.replica:
                raise _Usage("--replica needs a TARGET too")
            # Both calls get the clause's one tmp_path: two handles on one file.
            factory, replica, name = _sqlite, _sqlite, args.name or "sqlite"
        else:
            factory = _resolve(args.target, "TARGET")
            replica = _resolve(args.replica, "--replica") if args.replica else None
            name = args.name or args.target.partition(":")[2]
        clauses = _selected(args.keyword)
    except _Usage as exc:
        print(f"storetest check: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def progress(state: Progress) -> None:
        if args.quiet:
            return
        if state.result is not None:
            r = state.result
            print(f"  [{state.index + 1}/{state.total}] {SHOWN[r.outcome]:5} {r.clause} ({r.seconds:.2f}s)",
                  flush=True)
        elif state.elapsed:
            print(f"  [{state.index + 1}/{state.total}] ...   {state.clause}: {state.elapsed:.0f}s, "
                  f"{state.examples} examples or rounds done", flush=True)

    try:
        report = check(factory, replica, clauses=clauses, profile=args.profile, seed=args.seed,
                       nonce=args.nonce, name=name, progress=progress)
    except (TypeError, ValueError) as exc:
        print(f"storetest check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    report = _with_replays(report, args)
    _print(report, args)
    return EXIT_OK if report.ok else EXIT_FAILED


def _with_replays(report: Report, args: argparse.Namespace) -> Report:
    """Each failure carries the command that replays it from the author's shell."""
    command = ["storetest", "check", *([args.target] if args.target else [])]
    if args.replica:
        command += ["--replica", args.replica]
    results = tuple(
        replace(r, replay=" ".join([*command, *report.replay(r.clause)])) if r.outcome in ("failed", "error")
        else r
        for r in report.results
    )
    return replace(report, results=results)


def _print(report: Report, args: argparse.Namespace) -> None:
    for failure in report.failures():
        if failure.setup:
            # Said once: the factory fails before any clause could run.
            print(f"\n{failure.diagnosis}\n{failure.details}")
            print(f"{len(report.not_run)} clauses not run: the factory fails before them")
            continue
        print(f"\n{failure.clause}: {failure.outcome}\n{failure.details or failure.diagnosis}")
        print(f"replay: {failure.replay}")
    print()
    print(render_text(report))
    if args.report:
        Path(args.report).write_text(render([report], args.report) + "\n", encoding="utf-8")
        print(f"report written to {args.report}")


if __name__ == "__main__":
    sys.exit(main())
