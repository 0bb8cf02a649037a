"""The pytest plugin: ``run_conformance``, the throwaway-database fixtures, options."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from storetest import _databases


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
