"""Throwaway Redis servers and clusters: a key prefix of the caller's own stands in for a
database, only its keys are deleted afterwards, and the ladder says how to get one."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import storetest
from reference_stores.memory import MemoryBackend, MemoryStore
from storetest import databases
from storetest._engine.servers import Unavailable
from storetest._engine.servers import redis as redis_databases

redis = pytest.importorskip("redis")
from redis.cluster import RedisCluster  # noqa: E402

pytest_plugins = ["pytester"]

needs_binary = pytest.mark.skipif(
    redis_databases.find_redis_server() is None, reason="redis-server is not installed here"
)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[str]:
    """A server this test starts, standing in for one storetest did not start."""
    server = redis_databases.start_server(tmp_path / "server")
    try:
        yield server.url
    finally:
        os.kill(server.pid, signal.SIGTERM)
        os.waitpid(server.pid, 0)


@needs_binary
def test_a_named_server_loses_only_the_keys_under_the_prefix(
    own_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORETEST_REDIS_URL", own_server)
    client = redis.Redis.from_url(own_server)
    client.set("someone-elses-key", "kept")
    client.set("storetest:kept", "a prefix of another run")
    with databases.throwaway("redis") as (url, prefix):
        assert url == own_server
        assert prefix.startswith("storetest:") and prefix.endswith(":"), prefix
        writer = redis.Redis.from_url(url)
        for i in range(1200):  # more than one SCAN page and one UNLINK batch
            writer.set(f"{prefix}{i}", i)
        writer.close()
    assert client.dbsize() == 2, sorted(client.keys())
    assert client.get("someone-elses-key") == b"kept"
    client.close()


@needs_binary
def test_a_prefix_with_glob_characters_matches_only_itself(own_server: str) -> None:
    client = redis.Redis.from_url(own_server)
    client.set("storetest:a1", "kept")
    client.set("storetest:[a]1", "deleted")
    assert redis_databases.delete_prefixed(own_server, "storetest:[a]") == 1
    assert client.keys() == [b"storetest:a1"]
    client.close()


def test_an_empty_prefix_is_refused_rather_than_deleting_everything() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        redis_databases.delete_prefixed("redis://127.0.0.1:1/0", "")


@needs_binary
def test_a_local_cluster_has_three_masters_and_cleans_every_one() -> None:
    with databases.throwaway("redis-cluster") as (url, prefix):
        cluster: Any = RedisCluster.from_url(url)
        primaries = cluster.get_primaries()
        assert len(primaries) == 3, primaries
        keys = [f"{prefix}{{{i}}}" for i in range(60)]  # hash tags spread them over slots
        for key in keys:
            cluster.set(key, 1)
        holders = {cluster.get_node_from_key(k).name for k in keys}
        assert len(holders) == 3, holders
        cluster.set("outside", 1)
        assert redis_databases.delete_prefixed(url, prefix, cluster=True) == 60
        assert [k for k in cluster.scan_iter()] == [b"outside"]
        cluster.close()


def test_redis_in_storetest_require_requires_the_server_and_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORETEST_REQUIRE", "redis")
    assert databases.required_backends() == {"redis", "redis-cluster"}
    monkeypatch.setenv("STORETEST_REQUIRE", "all")
    assert {"redis", "redis-cluster"} <= databases.required_backends()


def test_without_a_way_the_message_names_every_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STORETEST_REDIS_URL", "STORETEST_REDIS_CLUSTER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(redis_databases, "docker_engine_answers", lambda: False)
    monkeypatch.setattr(redis_databases, "find_redis_server", lambda: None)
    with pytest.raises(Unavailable) as server:
        next(databases.provision("redis", tmp_path / "p", tmp_path / "s"))
    for way in ("STORETEST_REDIS_URL", "Docker", "redis-server"):
        assert way in str(server.value), str(server.value)
    with pytest.raises(Unavailable) as cluster:
        next(databases.provision("redis-cluster", tmp_path / "p", tmp_path / "s"))
    for way in ("STORETEST_REDIS_CLUSTER_URL", "redis-server", "redis-cli"):
        assert way in str(cluster.value), str(cluster.value)


def test_a_prefix_is_for_redis_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefix= is for the Redis backends"):
        databases.provision("postgres", tmp_path / "p", tmp_path / "s", prefix="x:")


@needs_binary
def test_check_supplies_the_url_and_the_prefix(monkeypatch: pytest.MonkeyPatch, own_server: str) -> None:
    # A named server keeps this cheap; the cluster's URL takes the same path in check().
    monkeypatch.setenv("STORETEST_REDIS_URL", own_server)
    seen: list[tuple[str, str]] = []
    backend = MemoryBackend()

    def factory(storetest_redis_url: str, storetest_redis_prefix: str) -> Any:
        seen.append((storetest_redis_url, storetest_redis_prefix))
        redis.Redis.from_url(storetest_redis_url).set(f"{storetest_redis_prefix}k", 1)
        return MemoryStore(backend)

    report = storetest.check(factory, clauses=["unknown_session_is_empty", "save_replaces_the_transcript"])
    assert report.ok, str(report)
    assert len(seen) == 2 and len(set(seen)) == 1, seen
    url, prefix = seen[0]
    assert url == own_server and prefix.startswith("storetest:"), seen
    assert redis.Redis.from_url(own_server).keys() == [], "check() left the prefix's keys behind"


INNER = """
import os

OUT = {out!r}

def test_record(storetest_redis_url, storetest_redis_cluster_url, storetest_redis_prefix):
    import redis
    redis.Redis.from_url(storetest_redis_url).set(storetest_redis_prefix + "k", 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(OUT, worker), "w") as f:
        f.write(f"{{storetest_redis_url}} {{storetest_redis_cluster_url}} {{storetest_redis_prefix}}")

test_again = test_record
"""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@needs_binary
def test_xdist_workers_share_one_server_and_one_cluster_with_prefixes_of_their_own(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("STORETEST_REDIS_URL", "STORETEST_REDIS_CLUSTER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setenv("STORETEST_REQUIRE", "redis")
    out = tmp_path / "seen"
    out.mkdir()
    pytester.makepyfile(INNER.format(out=str(out)))
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--dist", "each")
    result.assert_outcomes(passed=4)
    records = [p.read_text().split() for p in out.iterdir()]
    assert len(records) == 2, records
    assert len({r[0] for r in records}) == 1 and len({r[1] for r in records}) == 1, records
    assert len({r[2] for r in records}) == 2, "two workers shared a key prefix"
    for url in records[0][:2]:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert not _listening(port), f"the server at {url} outlived the run"


@pytest.mark.parametrize("require", ["", "redis"])
def test_unavailable_redis_skips_unless_required(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require: str
) -> None:
    for name in ("STORETEST_REDIS_URL", "STORETEST_REDIS_CLUSTER_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STORETEST_REQUIRE", require)
    # In process, so these stand for the inner run too (and are undone after).
    monkeypatch.setattr(redis_databases, "find_redis_server", lambda: None)
    monkeypatch.setattr(redis_databases, "docker_engine_answers", lambda: False)
    pytester.makepyfile(
        "def test_server(storetest_redis_url): pass\n"
        "def test_cluster(storetest_redis_cluster_url): pass\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")
    if require:
        result.assert_outcomes(errors=2)
        result.stdout.fnmatch_lines(["*redis is required (STORETEST_REQUIRE)*STORETEST_REDIS_URL*"])
        result.stdout.fnmatch_lines(["*redis-cluster is required (STORETEST_REQUIRE)*STORETEST_REDIS_CLUSTER_URL*"])
    else:
        result.assert_outcomes(skipped=2)


def test_ci_requires_redis() -> None:
    script = (Path(__file__).parent.parent / ".ci" / "run").read_text()
    assert "STORETEST_REQUIRE=postgres,mysql,redis" in script, script


def test_the_workflow_has_a_redis_job_that_requires_it() -> None:
    workflow = (Path(__file__).parent.parent / ".github" / "workflows" / "ci.yml").read_text()
    job = workflow[workflow.index("\n  redis:"):]
    assert "STORETEST_REQUIRE: redis" in job and "tests/test_conformance_redis*.py" in job, job
