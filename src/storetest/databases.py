"""Throwaway databases, for storetest's own tests and for any store author's.

    from storetest import databases

    with databases.throwaway("postgres") as url:   # postgresql://...
        ...                                         # a database nobody else uses

    with databases.throwaway("redis") as (url, prefix):   # redis://..., storetest:<hex>:
        ...                                               # write only keys under prefix

Each backend (``postgres``, ``mysql``, ``mongodb``, ``redis``, ``redis-cluster``) is
tried in this order:

1. ``STORETEST_<BACKEND>_URL`` names a server: a database is created in it and
   dropped afterwards;
2. a Docker engine answers a ping: testcontainers starts a container;
3. the server's binaries are installed: a server is started in a temporary directory
   (under pytest, one per test run, shared by xdist workers);
4. otherwise :class:`Unavailable` is raised, naming the three ways to get one.

Redis has no ``CREATE DATABASE``: a Redis throwaway is a server (or a cluster node's
URL) and a key prefix of the caller's own (:class:`RedisTarget`); afterwards the keys
under that prefix are deleted, and a server storetest did not start is never flushed.
A cluster has no Docker rung: it is three masters from the local ``redis-server``.

``throwaway("postgres", durable=True)`` (or ``"mysql"``) gives a database on a server
that keeps every acknowledged commit (PostgreSQL ``fsync``, ``synchronous_commit`` and
``full_page_writes`` on; MariaDB/MySQL ``innodb_flush_log_at_trx_commit=1`` and the
doublewrite buffer), read back from the server before the URL is handed out; for
benchmarks, which must time what a production server does. Without it a local server
skips those flushes: tests compare nothing that durability would change.

Under pytest the plugin's fixtures ``storetest_postgres_url``, ``storetest_mysql_url``,
``storetest_mongodb_url``, ``storetest_redis_url`` and ``storetest_redis_cluster_url``
(with ``storetest_redis_prefix``, one prefix for both) do this per test run, and
``STORETEST_REQUIRE`` turns "unavailable" into a failure (``redis`` requires the server
and the cluster); :func:`storetest.check` supplies the same names. Importing this module
loads no driver.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Literal, overload

from storetest._engine.servers import BACKENDS, TestRun, Unavailable, required_backends, stop_local_servers
from storetest._engine.servers.redis import RedisTarget, new_prefix

__all__ = [
    "BACKENDS",
    "DURABLE_BACKENDS",
    "RedisTarget",
    "Unavailable",
    "durability",
    "mysql_connection",
    "new_prefix",
    "provision",
    "required_backends",
    "throwaway",
]

_REDIS = ("redis", "redis-cluster")

#: Backends that :func:`throwaway` can give ``durable=True``.
DURABLE_BACKENDS = ("postgres", "mysql")


def provision(
    backend: str, private_dir: Path, shared_dir: Path, *, prefix: str | None = None, durable: bool = False
) -> Iterator[str]:
    """The provisioning generator behind :func:`throwaway`: yields a database URL, and
    drops the database when resumed (for ``redis`` and ``redis-cluster``: deletes the
    keys under ``prefix``, a fresh one when ``None``). Local servers are registered under
    ``shared_dir`` (stop them with ``stop_local_servers(shared_dir)``).

    :raises ValueError: unknown backend, a ``prefix`` for a backend that has databases,
        or ``durable`` for a backend not in :data:`DURABLE_BACKENDS`.
    :raises Unavailable: no way to get this backend here (with ``durable``: no durable
        server of it).
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if durable and backend not in DURABLE_BACKENDS:
        raise ValueError(f"durable=True is offered for {', '.join(DURABLE_BACKENDS)}, not {backend!r}")
    run = TestRun(private_dir=private_dir, shared_dir=shared_dir)
    if backend in _REDIS:
        from storetest._engine.servers import redis

        return (redis.provision_cluster if backend == "redis-cluster" else redis.provision)(run, prefix)
    if prefix is not None:
        raise ValueError(f"prefix= is for the Redis backends; {backend} gets a database of its own")
    module = importlib.import_module(f"storetest._engine.servers.{backend}")
    if durable:
        return module.provision(run, durable=True)  # type: ignore[no-any-return]
    return module.provision(run)  # type: ignore[no-any-return]


@overload
def throwaway(
    backend: Literal["redis", "redis-cluster"], *, prefix: str | None = None
) -> AbstractContextManager[RedisTarget]: ...
@overload
def throwaway(backend: Literal["postgres", "mysql"], *, durable: bool = False) -> AbstractContextManager[str]: ...
@overload
def throwaway(backend: Literal["mongodb"]) -> AbstractContextManager[str]: ...
@overload
def throwaway(backend: str, *, prefix: str | None = None, durable: bool = False) -> AbstractContextManager[Any]: ...
def throwaway(backend: str, *, prefix: str | None = None, durable: bool = False) -> AbstractContextManager[Any]:
    """A fresh database of ``backend`` for the duration of the ``with`` block: its URL;
    for ``redis`` and ``redis-cluster`` a :class:`RedisTarget`, the URL and the key
    prefix (``prefix``, or a fresh one) whose keys are deleted afterwards. Any server
    started for it is stopped afterwards.

    :param durable: on a server that keeps every acknowledged commit (see the module's
        docstring); only for :data:`DURABLE_BACKENDS`.
    :raises ValueError: unknown backend, or ``durable`` where it is not offered.
    :raises Unavailable: no way to get this backend here (the message says how).
    """
    if backend in _REDIS:
        prefix = prefix or new_prefix()
    return _throwaway(backend, prefix, durable)


@contextmanager
def _throwaway(backend: str, prefix: str | None, durable: bool) -> Iterator[Any]:
    with tempfile.TemporaryDirectory(prefix=f"storetest-{backend}-") as directory:
        root = Path(directory)
        try:
            generator = provision(backend, root / "private", root / "shared", prefix=prefix, durable=durable)
            url = next(generator)
            try:
                yield url if prefix is None else RedisTarget(url, prefix)
            finally:
                next(generator, None)  # drops the database
        finally:
            stop_local_servers(root / "shared")


def durability(backend: str, url: str) -> dict[str, str]:
    """The durability settings of the server holding ``url``, as the server reports them
    (PostgreSQL: ``fsync``, ``synchronous_commit``, ``full_page_writes``; MariaDB/MySQL:
    ``innodb_flush_log_at_trx_commit``, ``innodb_doublewrite``). Benchmarks print them
    with their figures.

    :raises ValueError: a backend not in :data:`DURABLE_BACKENDS`.
    """
    if backend not in DURABLE_BACKENDS:
        raise ValueError(f"durability is read for {', '.join(DURABLE_BACKENDS)}, not {backend!r}")
    module = importlib.import_module(f"storetest._engine.servers.{backend}")
    return module.durability(url)  # type: ignore[no-any-return]


def mysql_connection(url: str, **kwargs: Any) -> Any:
    """A pymysql connection for a ``mysql://user:password@host:port/dbname`` URL:
    ``utf8mb4``, autocommit off; ``kwargs`` override those (see :func:`pymysql.connect`).

    :raises ValueError: not a ``mysql://`` (or ``mariadb://``) URL.
    """
    from storetest._engine.servers.mysql import connect

    return connect(url, **kwargs)
