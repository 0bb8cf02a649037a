"""A throwaway server that one test owns, to stop and start again: the run-wide server
other xdist workers use must never be restarted under them.

It is started the way :mod:`storetest._engine.servers` starts a local server, with commits
that survive the server process being killed (PostgreSQL ``synchronous_commit=on``,
fsync still off: only the server process dies, never the machine; MariaDB its durable
settings; Redis ``appendonly yes`` with ``appendfsync always``, without which a restart
loses what the server held by its own setting), which the run-wide servers trade away
for speed; and restarted from its own command line (read from ``/proc``, Linux only;
Redis rewrites its own, so it is started again with the same settings instead).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from storetest._engine import servers

#: How a test stops a server: PostgreSQL's fast (SIGINT) and immediate (SIGQUIT)
#: shutdowns; MariaDB's normal one (SIGTERM, "fast") and one with
#: ``innodb_fast_shutdown=2`` ("immediate": InnoDB stops cold, as if it had crashed,
#: and recovers at the next start); Redis's SIGTERM ("fast") and ``SHUTDOWN NOSAVE``
#: ("immediate"); or SIGKILL of every server process.
Stop = Literal["fast", "immediate", "SIGKILL"]

Backend = Literal["postgres", "mysql", "redis"]

#: Every acknowledged Redis write in the AOF, fsynced, before its reply.
REDIS_SETTINGS = {"appendonly": "yes", "appendfsync": "always"}

# A commit's WAL reaches the kernel before COMMIT returns; no fsync.
_POSTGRES_SETTINGS = {"fsync": "off", "synchronous_commit": "on", "full_page_writes": "off"}


def skip_unless_private(backend: str) -> None:
    """Skip (or fail, if ``STORETEST_REQUIRE`` names the backend) when no private server
    can be had: one named by ``STORETEST_<BACKEND>_URL`` is not ours to restart."""
    if servers.url_from_env(backend) is not None:
        pytest.skip(
            f"STORETEST_{backend.upper()}_URL names a server storetest did not start: "
            "restarting it would disturb whoever else uses it; unset it to run this test "
            "on a private throwaway server"
        )


class PrivateServer:
    """A local server in a temp dir of its own; :meth:`stop` and :meth:`start` again on
    the same port and data. :meth:`close` removes it."""

    def __init__(self, backend: Backend, ready: Callable[[str], bool]) -> None:
        self.backend = backend
        self._ready = ready
        top = Path(tempfile.mkdtemp(prefix=f"storetest-private-{backend}-"))
        try:
            server = self._first_start(backend, top)
        except servers.Unavailable as exc:
            shutil.rmtree(top, ignore_errors=True)
            if backend in servers.required_backends():
                pytest.fail(f"STORETEST_REQUIRE names {backend}, but no private server: {exc}")
            pytest.skip(f"no private {backend} server here: {exc}")
        self.url = server.url
        self._directory = server.directory
        self._top = top
        self.pid = server.pid
        self._argv = _cmdline(self.pid)
        self._as: dict[str, Any] = {}
        uid = os.stat(f"/proc/{self.pid}").st_uid
        if uid != os.getuid():
            entry = pwd.getpwuid(uid)
            self._as = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    @staticmethod
    def _first_start(backend: str, top: Path) -> Any:
        if backend == "redis":
            from storetest._engine.servers import redis

            return redis.start_server(top / "data", config=REDIS_SETTINGS)
        if backend == "postgres":
            from storetest._engine.servers import postgres

            bindir = postgres.find_bindir()
            if bindir is None:
                raise servers.Unavailable(postgres.HOW_TO_ENABLE)
            return postgres._start_local(bindir, top, _POSTGRES_SETTINGS)
        from storetest._engine.servers import mysql

        binaries = mysql._local_binaries()
        if binaries is None:
            raise servers.Unavailable("no mariadbd/mysqld and install-db binaries")
        return mysql._start_local(top, *binaries, durable=True)

    def stop(self, how: Stop) -> None:
        """Stop the server and wait until every one of its processes is gone."""
        children = _children(self.pid)
        if how == "SIGKILL":
            # The server's children too: PostgreSQL's backends outlive a killed
            # postmaster, and a new one refuses to start while they hold its memory.
            for pid in [self.pid, *children]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif self.backend == "mysql" and how == "immediate":
            from storetest._engine.servers.mysql import connect

            conn = connect(self.url, autocommit=True)
            try:
                with conn.cursor() as cur:
                    cur.execute("SET GLOBAL innodb_fast_shutdown = 2")  # not kept across the restart
            finally:
                conn.close()
            os.kill(self.pid, signal.SIGTERM)
        elif self.backend == "redis" and how == "immediate":
            import redis

            redis.Redis.from_url(self.url, socket_timeout=10).shutdown(nosave=True)
        else:
            clean = signal.SIGINT if self.backend == "postgres" else signal.SIGTERM
            os.kill(self.pid, signal.SIGQUIT if how == "immediate" else clean)
        for pid in [self.pid, *children]:
            _reap(pid)

    def start(self) -> None:
        """Start it again from its command line; return once it accepts connections."""
        if self.backend == "redis":
            from storetest._engine.servers import redis

            port = int(self.url.rsplit(":", 1)[1].split("/")[0])
            self.pid = redis.start_server(Path(self._directory), port=port, config=REDIS_SETTINGS).pid
            return
        with open(Path(self._top) / "restarts.log", "ab") as log:
            process = subprocess.Popen(
                self._argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, **self._as,
            )
        self.pid = process.pid
        deadline = time.monotonic() + 60
        while not self._ready(self.url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the private {self.backend} server did not come back: {self._argv}")
            time.sleep(0.02)

    def close(self) -> None:
        try:
            self.stop("SIGKILL")
        finally:
            shutil.rmtree(self._directory, ignore_errors=True)
            shutil.rmtree(self._top, ignore_errors=True)


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry))
    return found


def _reap(pid: int) -> None:
    """Wait for ``pid`` to exit: ours to reap if it is our child, else watched."""
    try:
        os.waitpid(pid, 0)
        return
    except ChildProcessError:
        pass
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.01)
