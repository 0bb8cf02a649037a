"""Throwaway databases, for storetest's own tests and for any store author's.

    from storetest import databases

    with databases.throwaway("postgres") as url:   # postgresql://...
        ...                                         # a database nobody else uses

Each backend (``postgres``, ``mysql``, ``mongodb``) is tried in this order:

1. ``STORETEST_<BACKEND>_URL`` names a server: a database is created in it and
   dropped afterwards;
2. a Docker engine answers a ping: testcontainers starts a container;
3. the server's binaries are installed: a server is started in a temporary directory
   (under pytest, one per test run, shared by xdist workers);
4. otherwise :class:`Unavailable` is raised, naming the three ways to get one.

Under pytest the plugin's fixtures ``storetest_postgres_url``, ``storetest_mysql_url``
and ``storetest_mongodb_url`` do this per test run, and ``STORETEST_REQUIRE`` turns
"unavailable" into a failure; :func:`storetest.check` uses :func:`throwaway` for a
factory that asks for those names. Importing this module loads no driver.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storetest._databases import BACKENDS, TestRun, Unavailable, required_backends, stop_local_servers

__all__ = ["BACKENDS", "Unavailable", "mysql_connection", "provision", "required_backends", "throwaway"]


def provision(backend: str, private_dir: Path, shared_dir: Path) -> Iterator[str]:
    """The provisioning generator behind :func:`throwaway`: yields a database URL, and
    drops the database when resumed. Local servers are registered under
    ``shared_dir`` (stop them with ``stop_local_servers(shared_dir)``).

    :raises ValueError: unknown backend.
    :raises Unavailable: no way to get this backend here.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module = importlib.import_module(f"storetest._databases.{backend}")
    return module.provision(TestRun(private_dir=private_dir, shared_dir=shared_dir))  # type: ignore[no-any-return]


@contextmanager
def throwaway(backend: str) -> Iterator[str]:
    """A fresh database of ``backend`` for the duration of the ``with`` block: its URL.
    Any server started for it is stopped afterwards.

    :raises ValueError: unknown backend.
    :raises Unavailable: no way to get this backend here (the message says how).
    """
    with tempfile.TemporaryDirectory(prefix=f"storetest-{backend}-") as directory:
        root = Path(directory)
        try:
            generator = provision(backend, root / "private", root / "shared")
            url = next(generator)
            try:
                yield url
            finally:
                next(generator, None)  # drops the database
        finally:
            stop_local_servers(root / "shared")


def mysql_connection(url: str, **kwargs: Any) -> Any:
    """A pymysql connection for a ``mysql://user:password@host:port/dbname`` URL:
    ``utf8mb4``, autocommit off; ``kwargs`` override those (see :func:`pymysql.connect`).

    :raises ValueError: not a ``mysql://`` (or ``mariadb://``) URL.
    """
    from storetest._databases.mysql import connect

    return connect(url, **kwargs)
