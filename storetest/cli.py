"""``storetest check``: run the conformance suite against a store and print the report.

    storetest check                              # the SQLite reference store, on a temp file
    storetest check mypkg.stores:make_store      # a third-party store factory
    storetest check mypkg.stores:make_store --replica mypkg.stores:make_replica --report out.md

It writes a one-call test module into a temporary directory and runs pytest on it, so
what it checks is exactly what ``run_conformance`` checks in a store's own test suite.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

import pytest

__all__ = ["main"]

_DEFAULT_TARGET = "sqlite (reference_stores.sqlite on a temporary file)"

_DEFAULT_MODULE = """\
from reference_stores.sqlite import SQLiteStore
from storetest import run_conformance


def sqlite(tmp_path):
    with SQLiteStore(tmp_path / "sessions.db") as store:
        yield store


run_conformance(sqlite, replica=sqlite, name="sqlite")
"""

_TARGET_MODULE = """\
from storetest import run_conformance
from {module} import {attribute} as factory
{replica_import}
run_conformance(factory, replica={replica}, name={name!r})
"""


def _resolve(target: str, flag: str) -> tuple[str, str]:
    module, sep, attribute = target.partition(":")
    if not sep or not module or not attribute.isidentifier():
        raise SystemExit(
            f"storetest check: {flag} {target!r} is not of the form package.module:factory"
        )
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise SystemExit(f"storetest check: cannot import {module!r} for {flag}: {exc}") from None
    if not callable(getattr(loaded, attribute, None)):
        raise SystemExit(
            f"storetest check: {module!r} has no callable {attribute!r} for {flag}; "
            "name a function that returns (or yields) a store"
        )
    return module, attribute


def _test_module(target: str | None, replica: str | None, name: str | None) -> str:
    if target is None:
        if replica:
            raise SystemExit("storetest check: --replica needs a TARGET too")
        return _DEFAULT_MODULE
    module, attribute = _resolve(target, "TARGET")
    replica_import, replica_expr = "", "None"
    if replica:
        replica_module, replica_attribute = _resolve(replica, "--replica")
        replica_import = f"from {replica_module} import {replica_attribute} as replica_factory\n"
        replica_expr = "replica_factory"
    return _TARGET_MODULE.format(
        module=module,
        attribute=attribute,
        replica_import=replica_import,
        replica=replica_expr,
        name=name or attribute,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="storetest", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "check",
        help="run the conformance suite against a store and print the report",
        description="Run every clause against a store; exit 1 if any clause fails.",
    )
    check.add_argument(
        "target",
        nargs="?",
        help="package.module:factory, a callable returning (or yielding) the store; "
        f"default: {_DEFAULT_TARGET}",
    )
    check.add_argument("--replica", metavar="MODULE:FACTORY",
                       help="a callable giving a second handle on the same data")
    check.add_argument("--name", help="label for the report (default: the factory's name)")
    check.add_argument("--report", metavar="FILE",
                       help="also write the report to FILE (.json for JSON, else Markdown)")
    # Names only: importing the plugin here would load Hypothesis before pytest can
    # rewrite its asserts; pytest validates the choice again.
    check.add_argument("--profile", choices=("fast", "ci", "thorough"), default="fast",
                       help="Hypothesis profile (default: fast; thorough is slow)")
    check.add_argument("--seed", type=int, help="seed for generated inputs and races")
    check.add_argument("-k", dest="keyword", metavar="EXPR", help="only clauses matching EXPR")
    check.add_argument("-x", "--exitfirst", action="store_true", help="stop at the first failure")
    check.add_argument("-v", "--verbose", action="store_true", help="a line per clause as it runs")
    args = parser.parse_args(argv)

    # Importing the target must work from the caller's directory, as `python -m` would.
    sys.path.insert(0, os.getcwd())
    source = _test_module(args.target, args.replica, args.name)
    with tempfile.TemporaryDirectory(prefix="storetest-check-") as directory:
        test_file = Path(directory) / "test_storetest_check.py"
        test_file.write_text(source, encoding="utf-8")
        pytest_args = [
            str(test_file),
            "--rootdir", directory,
            "-c", os.devnull,  # keep the caller's pytest configuration out of the run
            "-p", "no:cacheprovider",
            # The target was imported above to check it, too early for assert rewriting;
            # the clauses' own modules are rewritten as usual.
            "-W", "ignore::pytest.PytestAssertRewriteWarning",
            "--tb=short",
            "-v" if args.verbose else "-q",
            f"--storetest-profile={args.profile}",
        ]
        if args.report:
            pytest_args.append(f"--storetest-report={os.path.abspath(args.report)}")
        if args.seed is not None:
            pytest_args.append(f"--storetest-seed={args.seed}")
        if args.keyword:
            pytest_args += ["-k", args.keyword]
        if args.exitfirst:
            pytest_args.append("-x")
        code = pytest.main(pytest_args)
    return 0 if code == pytest.ExitCode.OK else 1


if __name__ == "__main__":
    sys.exit(main())
