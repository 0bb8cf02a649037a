"""``storetest.databases``: the public way to a throwaway database, outside pytest too."""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

import pytest

from storetest import databases
from storetest._engine import servers


def test_throwaway_gives_a_fresh_database_and_removes_it() -> None:
    asyncpg = pytest.importorskip("asyncpg")
    try:
        context = databases.throwaway("postgres")
        url = context.__enter__()
    except databases.Unavailable as exc:
        if "postgres" in databases.required_backends():
            raise
        pytest.skip(str(exc))
    name = url.rsplit("/", 1)[1]
    try:
        async def tables() -> int:
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("CREATE TABLE t (x int)")
                return int(await conn.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"))
            finally:
                await conn.close()

        assert asyncio.run(tables()) == 1, "the database was not empty"
    finally:
        context.__exit__(None, None, None)
    assert name.startswith("storetest"), name


def test_an_unknown_backend_is_named() -> None:
    with pytest.raises(ValueError, match="unknown backend 'oracle'"):
        with databases.throwaway("oracle"):
            pass


def _throwaway_or_skip(backend: str, **kwargs: bool) -> Any:
    try:
        context = databases.throwaway(backend, **kwargs)
        return context, context.__enter__()
    except databases.Unavailable as exc:
        if backend in databases.required_backends():
            raise
        pytest.skip(str(exc))


@pytest.mark.parametrize("backend", databases.DURABLE_BACKENDS)
def test_a_durable_throwaway_is_on_a_server_that_flushes_every_commit(backend: str) -> None:
    """``durable=True`` is what a benchmark compares stores on: every setting that makes
    a commit wait for the disk is on, as the server itself reports it."""
    pytest.importorskip({"postgres": "asyncpg", "mysql": "pymysql"}[backend])
    module = importlib.import_module(f"storetest._engine.servers.{backend}")
    context, url = _throwaway_or_skip(backend, durable=True)
    try:
        assert databases.durability(backend, url) == module.DURABLE
    finally:
        context.__exit__(None, None, None)


@pytest.mark.parametrize("backend", databases.DURABLE_BACKENDS)
def test_tests_keep_the_fast_server(backend: str, request: pytest.FixtureRequest) -> None:
    """The test run's own server (a local one) skips the flushes: durability is not
    what the tests compare, and it costs them time."""
    pytest.importorskip({"postgres": "asyncpg", "mysql": "pymysql"}[backend])
    if servers.url_from_env(backend) is not None:
        pytest.skip(f"STORETEST_{backend.upper()}_URL names the server; its settings are its owner's")
    url = request.getfixturevalue(f"storetest_{backend}_url")
    module = importlib.import_module(f"storetest._engine.servers.{backend}")
    found = databases.durability(backend, url)
    assert all(found[name] != value for name, value in module.DURABLE.items()), found


@pytest.mark.parametrize("backend", databases.DURABLE_BACKENDS)
def test_a_server_that_is_not_durable_is_refused_for_durable(
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named server that skips flushes is refused for ``durable=True``, naming the
    setting, rather than handed to a benchmark that would then time nothing durable."""
    pytest.importorskip({"postgres": "asyncpg", "mysql": "pymysql"}[backend])
    if servers.url_from_env(backend) is not None:
        pytest.skip(f"STORETEST_{backend.upper()}_URL names the server; its settings are its owner's")
    fast_url = request.getfixturevalue(f"storetest_{backend}_url")  # the run's fast server
    monkeypatch.setenv(f"STORETEST_{backend.upper()}_URL", fast_url)
    setting = {"postgres": "fsync=off", "mysql": "innodb_flush_log_at_trx_commit=0"}[backend]
    with pytest.raises(databases.Unavailable, match=f"durable .* asked for, but the server has .*{setting}"):
        with databases.throwaway(backend, durable=True):
            pass


def test_durable_is_refused_where_it_is_not_offered() -> None:
    with pytest.raises(ValueError, match="durable=True is offered for postgres, mysql, not 'mongodb'"):
        with databases.throwaway("mongodb", durable=True):
            pass
