"""Throwaway MySQL/MariaDB databases: from ``STORETEST_MYSQL_URL``, a Docker engine, or
a MariaDB/MySQL server started from local binaries (see the package docstring).

Every caller gets a database of its own (``storetest_<random>``, ``utf8mb4``), dropped
after the generator resumes. pymysql, testcontainers and docker are imported inside the
functions, so importing this module loads no driver.

Two modes. The default, for tests: a local server runs with
``innodb_flush_log_at_trx_commit=0`` and no doublewrite buffer (throwaway data;
durability only costs time). ``durable=True``, for anything that times a commit against
another store, gives a database on a server with :data:`DURABLE` settings (the redo log
written and flushed at every commit, torn pages repairable), read back from the server
before the URL is handed out: a local server is started in that mode (a separate one
from the fast server), and a named or Docker server that is not durable is refused
with :class:`Unavailable` naming the settings that differ.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

from storetest._engine.servers import (
    LocalServer,
    TestRun,
    Unavailable,
    docker_engine_answers,
    durable_or_refused,
    free_port,
    shared_local_server,
    url_from_env,
    wait_until,
)

__all__ = ["DURABLE", "connect", "durability", "provision"]

_HOW_TO_ENABLE = (
    "set STORETEST_MYSQL_URL to a server where the user may create databases "
    "(e.g. mysql://root:secret@127.0.0.1:3306/), run a Docker engine, "
    "or install MariaDB/MySQL server binaries (mariadbd or mysqld, e.g. apt install mariadb-server)"
)

_SERVER_NAMES = ("mariadbd", "mysqld")
_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
_INSTALL_DB_NAMES = ("mariadb-install-db", "mysql_install_db")

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

#: The server settings of a durable database, as ``SELECT @@name`` reports them.
DURABLE: Final = {"innodb_flush_log_at_trx_commit": "1", "innodb_doublewrite": "1"}

#: What the local server runs with in the fast mode (and what tests get).
_FAST = {"innodb_flush_log_at_trx_commit": "0", "innodb_doublewrite": "0"}

# A unix socket path longer than this is refused by the kernel (108 bytes on Linux).
_MAX_SOCKET_PATH = 100


def connect(url: str, **kwargs: Any) -> Any:
    """A pymysql connection for a ``mysql://user:password@host:port/dbname`` URL.

    The connection speaks ``utf8mb4``, has autocommit off, gives up on a read or write
    after 30 seconds (``read_timeout``, ``write_timeout``: what bounds a store's calls)
    and skips TLS to a loopback address; ``kwargs`` are passed to
    :func:`pymysql.connect` and override those defaults.

    :raises ValueError: ``url`` is not a ``mysql://`` (or ``mariadb://``) URL.
    """
    import pymysql

    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb", "mysql+pymysql"):
        raise ValueError(f"not a mysql:// URL: {url!r}")
    options: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "charset": "utf8mb4",
        "autocommit": False,
        "read_timeout": 30,
        "write_timeout": 30,
    }
    if options["host"] in _LOOPBACK:
        # pymysql otherwise tries TLS ("preferred") and builds a fresh SSL context per
        # connection, ~100 ms of loading CA certificates, for a socket that never
        # leaves the machine.
        options["ssl_disabled"] = True
    database = unquote(parts.path.lstrip("/"))
    if database:
        options["database"] = database
    options.update(kwargs)
    return pymysql.connect(**options)


def _with_database(server_url: str, database: str) -> str:
    parts = urlsplit(server_url)
    return parts._replace(path="/" + quote(database), query="", fragment="").geturl()


@contextlib.contextmanager
def _fresh_database(server_url: str) -> Iterator[str]:
    """Create ``storetest_<random>`` on the server, yield its URL, drop it afterwards."""
    name = f"storetest_{secrets.token_hex(6)}"
    conn = connect(_with_database(server_url, ""), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        conn.close()
    try:
        yield _with_database(server_url, name)
    finally:
        conn = connect(_with_database(server_url, ""), autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()


def provision(run: TestRun, *, durable: bool = False) -> Iterator[str]:
    """Yield the URL of a MySQL/MariaDB database nobody else uses; remove it on resume.
    With ``durable``, on a server whose :func:`durability` is :data:`DURABLE`.

    :raises Unavailable: no server URL in the environment, no Docker engine and no
        local server binaries; the message names the three ways to get one. With
        ``durable``: the server found is not durable (the message names the settings).
    """
    return durable_or_refused(
        _databases(run, durable), durable=durable, server="MySQL/MariaDB", want=DURABLE, read=durability
    )


def durability(url: str) -> dict[str, str]:
    """The server's :data:`DURABLE` settings as a session on ``url`` reads them."""
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT " + ", ".join(f"@@global.{name}" for name in DURABLE))
            row = cur.fetchone()
    finally:
        conn.close()
    # A number for a boolean or numeric variable; text (MariaDB 11's doublewrite modes) as is.
    return {name: str(value) for name, value in zip(DURABLE, row, strict=True)}


def _databases(run: TestRun, durable: bool) -> Iterator[str]:
    server_url = url_from_env("mysql")
    if server_url is not None:
        with _fresh_database(server_url) as url:
            yield url
        return
    if docker_engine_answers():
        yield from _from_docker()
        return
    binaries = _local_binaries()
    if binaries is not None:
        key = "mysql-durable" if durable else "mysql"
        server = shared_local_server(key, run, lambda d: _start_local(d, *binaries, durable=durable))
        with _fresh_database(server.url) as url:
            yield url
        return
    raise Unavailable(f"no MySQL/MariaDB server here; to run these tests, {_HOW_TO_ENABLE}")


def _from_docker() -> Iterator[str]:
    try:
        from testcontainers.mysql import MySqlContainer
    except ImportError as exc:
        raise Unavailable(
            f"a Docker engine answers but testcontainers is missing ({exc})"
        ) from None
    password = secrets.token_hex(8)
    container = MySqlContainer("mysql:8.4", root_password=password)
    container.start()
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(3306)
        with _fresh_database(f"mysql://root:{password}@{host}:{port}/") as url:
            yield url
    finally:
        container.stop()


def _which(names: tuple[str, ...]) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
        for directory in _SBIN_DIRS:
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def _local_binaries() -> tuple[str, str] | None:
    server = _which(_SERVER_NAMES)
    install = _which(_INSTALL_DB_NAMES)
    if server is None or install is None:
        return None
    return server, install


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start_local(directory: Path, server: str, install: str, *, durable: bool = False) -> LocalServer:
    """Initialise a data dir in ``directory`` and start a server on a free port, with
    :data:`DURABLE` settings or the fast ones.

    Runs as whatever user we are (``--user=root`` keeps mariadbd from refusing to run as
    root). The returned pid is the server process itself, so stopping it needs no shell.
    """
    directory.mkdir(parents=True, exist_ok=True)
    datadir = directory / "data"
    install_log = directory / "install.log"
    # A temp dir of its own (install's bootstrap server too, through TMPDIR): a starting
    # server deletes every "#sql*" file in its tmpdir (/tmp by default), the temporary
    # tables of every other server using it.
    tmpdir = directory / "tmp"
    tmpdir.mkdir(exist_ok=True)
    with open(install_log, "wb") as log:
        done = subprocess.run(
            [
                install,
                "--no-defaults",
                "--user=root",
                f"--datadir={datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
            env={**os.environ, "TMPDIR": str(tmpdir)},
        )
    if done.returncode != 0:
        raise Unavailable(f"{install} failed (exit {done.returncode}):\n{_tail(install_log)}")
    socket_path = directory / "sock"
    if len(str(socket_path)) > _MAX_SOCKET_PATH:
        socket_path = Path(tempfile.gettempdir()) / f"storetest-mysql-{os.getpid()}.sock"
    error_log = directory / "error.log"
    last_problem = ""
    # free_port() can race with another process binding the same port: try a few.
    for _attempt in range(3):
        port = free_port()
        with open(directory / "server.out", "ab") as out:
            process = subprocess.Popen(
                [
                    server,
                    "--no-defaults",
                    "--user=root",
                    f"--datadir={datadir}",
                    f"--socket={socket_path}",
                    f"--port={port}",
                    "--bind-address=127.0.0.1",
                    f"--log-error={error_log}",
                    f"--tmpdir={tmpdir}",
                    f"--pid-file={directory / 'server.pid'}",
                    "--skip-log-bin",
                    "--skip-name-resolve",
                    "--character-set-server=utf8mb4",
                    *(f"--{name.replace('_', '-')}={value}" for name, value in (DURABLE if durable else _FAST).items()),
                    "--innodb-buffer-pool-size=128M",
                    "--performance-schema=OFF",
                    "--max-connections=500",
                    "--max-allowed-packet=64M",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own process group: a Ctrl-C aimed at pytest must not kill the
                # server under the other xdist workers; the plugin stops it at the end.
                start_new_session=True,
            )
        root_url = f"mysql://root:@127.0.0.1:{port}/"
        try:
            wait_until(
                _up_or_exited(process, root_url),
                timeout=60,
                what=f"{server} on port {port}",
            )
        except Unavailable:
            process.kill()
            process.wait()
            raise
        if process.poll() is not None:
            last_problem = f"{server} exited with {process.returncode}:\n{_tail(error_log)}"
            continue
        password = secrets.token_hex(12)
        try:
            _create_admin(root_url, password)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return LocalServer(
            backend="mysql",
            url=f"mysql://storetest:{password}@127.0.0.1:{port}/",
            pid=process.pid,
            directory=str(directory),
        )
    raise Unavailable(f"could not start a local MariaDB/MySQL server: {last_problem}")


def _up_or_exited(process: subprocess.Popen[bytes], url: str) -> Callable[[], bool]:
    return lambda: process.poll() is not None or _accepts(url)


def _accepts(url: str) -> bool:
    try:
        connect(url, connect_timeout=2).close()
    except Exception:
        return False
    return True


def _create_admin(root_url: str, password: str) -> None:
    # A named user with a password, so the URL looks like any other server's, and
    # tests can make least-privilege users (GRANT OPTION) without being root.
    conn = connect(root_url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE USER IF NOT EXISTS 'storetest'@'%%' IDENTIFIED BY %s", (password,))
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'storetest'@'%' WITH GRANT OPTION")
    finally:
        conn.close()
