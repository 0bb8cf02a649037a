"""Ctrl-C under pytest with the throwaway-database fixtures (issue 44) ends as under
``storetest check``: exit 130, the table with its INTR row, the ``--storetest-report``
written, every throwaway server stopped. Before, with the Redis fixtures, the plugin
stopped the servers before pytest tore the session's fixtures down, so the fixture's
cleanup connected to a server already gone: exit 1, a long traceback, no table, no
report. A second Ctrl-C (during the teardown) exits at once and still stops the servers
this process started, naming them with their pids; before, ``redis-server`` was left
running.

Each run is a real pytest in its own process group, sent SIGINT as a terminal sends it,
on real Redis, PostgreSQL and MariaDB servers started from local binaries.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The reference store of each backend, its factory taking the plugin's fixtures; its
#: first ``messages`` call marks the point and waits (Ctrl-C comes then); with
#: ``STOP_TWICE`` its teardown waits too (the second Ctrl-C comes then).
STORES = {
    "redis": ("redis-server", '''
from redis.asyncio import Redis
from reference_stores.redis import RedisStore as Base


async def factory(storetest_redis_url, storetest_redis_prefix):
    client = Redis.from_url(storetest_redis_url)
    yield Store(client, prefix=storetest_redis_prefix)
    await teardown()
    await client.aclose()
'''),
    "postgres": ("postgres", '''
import asyncpg
from reference_stores.postgres import SCHEMA, PostgresStore as Base


async def factory(storetest_postgres_url):
    pool = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=4)
    async with pool.acquire() as conn:
        await conn.execute(SCHEMA)
    yield Store(pool)
    await teardown()
    await pool.close()
'''),
    "mysql": ("mariadbd", '''
from reference_stores.mysql import SCHEMA, MySQLStore
from storetest.databases import mysql_connection as connect


class Base:  # the plain store, behind async methods so the call can wait as the others do
    def __init__(self, url):
        self.store = MySQLStore(lambda: connect(url))

    async def save(self, session, messages):
        self.store.save(session, messages)

    async def messages(self, session):
        return self.store.messages(session)


async def factory(storetest_mysql_url):
    conn = connect(storetest_mysql_url)
    with conn.cursor() as cur:
        for statement in SCHEMA:
            cur.execute(statement)
    conn.commit()
    conn.close()
    yield Store(storetest_mysql_url)
    await teardown()
'''),
}

COMMON = '''
import asyncio, os
from pathlib import Path

MARK = Path(os.environ["STOP_MARK"])


class Store(Base):
    async def messages(self, session):
        if not MARK.exists():
            MARK.write_text("call")
            await asyncio.sleep(30)  # Ctrl-C cancels it
        return await super().messages(session)


async def teardown():
    if os.environ.get("STOP_TWICE") and not Path(str(MARK) + ".teardown").exists():
        Path(str(MARK) + ".teardown").write_text("teardown")
        await asyncio.sleep(30)  # the second Ctrl-C comes now
'''

TEST_FILE = '''
from storetest import run_conformance
from dbstore import factory

run_conformance(factory, name="db")
'''

CLAUSES = "transcript_round_trips_exactly or save_replaces_the_transcript or unknown_session_is_empty"


def _servers_under(directory: Path) -> list[str]:
    """The processes whose working directory is under ``directory`` (a server chdirs to its data)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z" and cwd.startswith(str(directory)):
            found.append(f"pid {entry.name}: {command} (in {cwd})")
    return found


def _wait_for(path: Path, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 180
    while not path.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"the run ended before its point ({process.returncode}):\n{out}\n{err}")
        assert time.monotonic() < deadline, "the point never came"
        time.sleep(0.02)


def _interrupted(backend: str, tmp: Path, twice: bool = False,
                 runner: str = "pytest") -> tuple[subprocess.CompletedProcess[str], Path]:
    binary, store = STORES[backend]
    if shutil.which(binary) is None and not Path(f"/usr/sbin/{binary}").exists():
        pytest.skip(f"no {binary} here")
    (tmp / "dbstore.py").write_text(store + COMMON)
    (tmp / "test_db.py").write_text(TEST_FILE)
    base = tmp / "bt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), str(ROOT)]), "STOP_MARK": str(tmp / "mark"),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "STORETEST_REQUIRE": backend}
    if twice:
        env["STOP_TWICE"] = "1"
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS", f"STORETEST_{backend.upper()}_URL"):
        env.pop(name, None)
    command = [sys.executable, "-m", "pytest", "-p", "storetest.plugin", "-p", "no:cacheprovider", "-q",
               "test_db.py", "-k", CLAUSES, f"--basetemp={base}", f"--storetest-report={tmp / 'r.json'}"]
    if runner == "check":  # its throwaway servers live in the temporary directory
        base.mkdir()
        env["TMPDIR"] = str(base)
        command = [sys.executable, "-m", "storetest.cli", "check", "dbstore:factory", "-k", CLAUSES,
                   "--report", str(tmp / "r.json")]
    process = subprocess.Popen(command, cwd=tmp, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               process_group=0, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(tmp / "mark", process)
        os.killpg(process.pid, signal.SIGINT)
        if twice:
            _wait_for(tmp / "mark.teardown", process)
            os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, out, err), base


@pytest.mark.parametrize("backend", ["redis", "postgres", "mysql"])
def test_ctrl_c_under_pytest_with_the_database_fixtures(backend: str, tmp_path: Path) -> None:
    done, base = _interrupted(backend, tmp_path)
    both = done.stdout + done.stderr
    assert done.returncode == 130, both
    assert "  INTR  " in done.stdout, both  # the table, with the clause Ctrl-C stopped
    assert "Traceback" not in both, both
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["runs"][0]["interrupted"].startswith("interrupted after"), report
    time.sleep(1)  # a server told to stop may take a moment to exit
    assert _servers_under(base) == [], both


@pytest.mark.parametrize("runner", ["pytest", "check"])
def test_a_second_ctrl_c_still_stops_the_servers_it_started(runner: str, tmp_path: Path) -> None:
    done, base = _interrupted("redis", tmp_path, twice=True, runner=runner)
    both = done.stdout + done.stderr
    assert done.returncode == 130, both
    assert "storetest: interrupted again: exiting now, without teardown" in done.stderr, both
    assert "storetest: stopped the throwaway redis server (pid " in done.stderr, both
    time.sleep(1)
    assert _servers_under(base) == [], both
