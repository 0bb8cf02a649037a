"""Throwaway servers: one per backend per test run, even with xdist workers, and
stopped when the run ends."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from storetest._engine.servers import mysql, postgres

pytest_plugins = ["pytester"]

# This is the local-binaries path; where a machine lacks the binaries (a hosted CI runner
# with service containers instead), the URL path is what its jobs test.
needs_local_servers = pytest.mark.skipif(
    postgres.find_bindir() is None or mysql._local_binaries() is None,
    reason="PostgreSQL and MariaDB/MySQL server binaries are not installed here",
)

INNER = """
import os
from urllib.parse import urlsplit
import pytest

OUT = {out!r}

@pytest.mark.parametrize("n", range(4))
def test_uses_both(n, storetest_postgres_url, storetest_mysql_url):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(OUT, f"{{worker}}-{{n}}"), "w") as f:
        f.write(f"{{urlsplit(storetest_postgres_url).port}} {{urlsplit(storetest_mysql_url).port}}")
"""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@needs_local_servers
def test_xdist_workers_share_one_server_per_backend_and_it_stops_after(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Force the local-binaries path even where a URL or Docker is configured.
    for name in ("STORETEST_POSTGRES_URL", "STORETEST_MYSQL_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setenv("STORETEST_REQUIRE", "postgres,mysql")
    out = tmp_path / "ports"
    out.mkdir()
    pytester.makepyfile(INNER.format(out=str(out)))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    records = {p.name: p.read_text().split() for p in out.iterdir()}
    assert {name.split("-")[0] for name in records} == {"gw0", "gw1"}, records
    postgres_ports = {int(pg) for pg, _ in records.values()}
    mysql_ports = {int(my) for _, my in records.values()}
    assert len(postgres_ports) == 1, postgres_ports
    assert len(mysql_ports) == 1, mysql_ports
    assert not _listening(postgres_ports.pop()), "the Postgres server outlived the run"
    assert not _listening(mysql_ports.pop()), "the MariaDB server outlived the run"
