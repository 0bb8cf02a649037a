"""Throwaway PostgreSQL databases: from ``STORETEST_POSTGRES_URL``, a Docker engine, or
the server binaries installed here (see :mod:`storetest._engine.servers` for the order).

Every caller gets a database of its own (``storetest_<random>``), created in whichever
server was found and dropped (``WITH (FORCE)``) when the caller is done. A local server
is started at most once per test run and shared by the xdist workers; the plugin stops
it when the run ends. asyncpg is imported inside the functions that use it.

Two modes. The default, for tests, keeps nothing it need not: a local server runs with
``fsync=off``, ``synchronous_commit=off`` and ``full_page_writes=off`` (throwaway data;
durability only costs time). ``durable=True``, for anything that times a commit against
another store, gives a database on a server with :data:`DURABLE` settings, read back
from the server before the URL is handed out: a local server is started in that mode
(a separate one from the fast server), and a named or Docker server that is not durable
is refused with :class:`Unavailable` naming the settings that differ.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

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

__all__ = ["DURABLE", "HOW_TO_ENABLE", "durability", "find_bindir", "provision"]

HOW_TO_ENABLE = (
    "set STORETEST_POSTGRES_URL to a server where the tests may create databases "
    "(e.g. postgresql://postgres@localhost:5432/postgres), run a Docker engine "
    "(testcontainers starts postgres:16), or install the PostgreSQL server binaries "
    "(e.g. apt-get install postgresql, so that `pg_config --bindir` finds initdb)"
)

#: initdb and postgres refuse to run as root; this account runs them instead.
_SERVER_USER = "postgres"

#: The settings of a server that keeps every acknowledged commit: each commit's WAL is
#: flushed to disk before COMMIT returns, and a torn page can be repaired after a crash.
DURABLE: Final = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}

#: What the local server runs with in the fast mode (and what tests get).
_FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def provision(run: TestRun, *, durable: bool = False) -> Iterator[str]:
    """Yield the URL of a fresh PostgreSQL database; drop it (and stop any container)
    when resumed. With ``durable``, on a server whose :func:`durability` is
    :data:`DURABLE`.

    :raises Unavailable: no server URL, no Docker engine and no local binaries; the
        message says how to enable each. With ``durable``: the server found is not
        durable (the message names the settings).
    """
    return durable_or_refused(
        _databases(run, durable), durable=durable, server="PostgreSQL", want=DURABLE, read=durability
    )


def _databases(run: TestRun, durable: bool) -> Iterator[str]:
    server_url = url_from_env("postgres")
    if server_url is not None:
        yield from _fresh_database(server_url)
        return
    if docker_engine_answers():
        yield from _from_docker()
        return
    bindir = find_bindir()
    if bindir is not None:
        settings = DURABLE if durable else _FAST
        key = "postgres-durable" if durable else "postgres"
        server = shared_local_server(key, run, lambda d: _start_local(bindir, d, settings))
        yield from _fresh_database(server.url)
        return
    raise Unavailable(f"no PostgreSQL server found: {HOW_TO_ENABLE}")


def durability(url: str) -> dict[str, str]:
    """The server's ``fsync``, ``synchronous_commit`` and ``full_page_writes``, as the
    server reports them to a session on ``url``."""

    async def read() -> dict[str, str]:
        import asyncpg

        conn = await asyncpg.connect(url, timeout=30)
        try:
            rows = await conn.fetch(
                "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])", list(DURABLE)
            )
        finally:
            await conn.close()
        return {name: setting for name, setting in sorted(rows)}

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, read()).result()


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``postgres``, or ``None``."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            candidates.append(Path(out))
        except (OSError, subprocess.SubprocessError):
            pass
    # Newest version first: Debian installs each major version side by side.
    found = glob.glob("/usr/lib/postgresql/*/bin")
    found.sort(key=lambda p: _major(Path(p).parent.name), reverse=True)
    candidates.extend(Path(p) for p in found)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "postgres").is_file():
            return bindir
    return None


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


def _fresh_database(server_url: str) -> Iterator[str]:
    name = f"storetest_{secrets.token_hex(6)}"
    _run_sql(server_url, f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(server_url, name)
    finally:
        try:
            _run_sql(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception as exc:
            # A leftover database is worth a warning, not a failed run.
            warnings.warn(f"could not drop the test database {name!r}: {exc}", stacklevel=2)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _run_sql(url: str, sql: str) -> None:
    """Run one statement outside any transaction (CREATE/DROP DATABASE need that).

    It runs on a thread of its own with its own event loop, so this works whether or
    not the caller is already inside a running loop.
    """

    async def run() -> None:
        import asyncpg

        conn = await asyncpg.connect(url, timeout=30)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, run()).result()


def _from_docker() -> Iterator[str]:
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError:
        from testcontainers.postgres import PostgresContainer

    container: Any = PostgresContainer("postgres:16", driver=None)
    container.start()
    try:
        yield from _fresh_database(container.get_connection_url())
    finally:
        container.stop()


def _start_local(bindir: Path, suggested: Path, settings: dict[str, str]) -> LocalServer:
    # The data dir lives under /tmp rather than pytest's basetemp: basetemp is private
    # to root (mode 0700), which the postgres account cannot enter, and a short path
    # keeps the socket path under the 107-byte limit. The registry records this dir,
    # so stop_local_servers still removes it.
    del suggested
    as_root = os.geteuid() == 0
    user: str | None = None
    if as_root:
        try:
            pwd.getpwnam(_SERVER_USER)
        except KeyError:
            raise Unavailable(
                f"PostgreSQL binaries are in {bindir}, but initdb refuses to run as root and "
                f"there is no {_SERVER_USER!r} account to run it as; {HOW_TO_ENABLE}"
            ) from None
        user = _SERVER_USER
    top = Path(tempfile.mkdtemp(prefix="storetest-pg-"))
    data = top / "data"
    log_path = top / "server.log"
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(top, entry.pw_uid, entry.pw_gid)
    run_as = _as_user(user)
    initdb = subprocess.run(
        [
            str(bindir / "initdb"),
            "--no-sync",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-U",
            "postgres",
            "-D",
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        **run_as,
    )
    if initdb.returncode != 0:
        shutil.rmtree(top, ignore_errors=True)
        raise Unavailable(f"initdb in {bindir} failed: {initdb.stderr.strip() or initdb.stdout}")
    port = free_port()
    with open(log_path, "ab") as log:
        if user is not None:
            os.chown(log_path, pwd.getpwnam(user).pw_uid, -1)
        process = subprocess.Popen(
            [
                str(bindir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(top),
                "-c",
                "listen_addresses=127.0.0.1",
                # The mode: DURABLE, or _FAST (throwaway data, where durability only costs time).
                *(arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")),
                "-c",
                "max_connections=300",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            **run_as,
        )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def ready() -> bool:
        if process.poll() is not None:
            raise Unavailable(
                f"the local PostgreSQL server exited at start (code {process.returncode}): "
                f"{_tail(log_path)}"
            )
        probe = subprocess.run(
            [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)],
            capture_output=True,
            timeout=10,
        )
        return probe.returncode == 0

    try:
        wait_until(ready, timeout=60, what=f"the local PostgreSQL server on port {port}")
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(top, ignore_errors=True)
        raise
    return LocalServer(
        backend="postgres",
        url=url,
        pid=process.pid,
        directory=str(top),
        stop_signal=signal.SIGINT,  # "fast shutdown": ends sessions, exits cleanly
    )


def _as_user(user: str | None) -> dict[str, Any]:
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    # user=/group= make the child itself setuid before exec, so the pid we record is
    # the postmaster's own (no su/runuser in between to swallow the stop signal).
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [], "env": _env(entry)}


def _env(entry: pwd.struct_passwd) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["HOME"] = entry.pw_dir
    env["USER"] = entry.pw_name
    env["LC_ALL"] = "C"
    return env


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"
