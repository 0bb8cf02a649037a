"""Throwaway Redis servers and Redis Clusters: from ``STORETEST_REDIS_URL`` /
``STORETEST_REDIS_CLUSTER_URL``, a Docker engine (the single server only), or the
``redis-server`` binary installed here; otherwise
:class:`~storetest._engine.servers.Unavailable`.

Redis has no ``CREATE DATABASE``, so the ladder differs from the SQL servers' in one
rung: a caller is isolated by a *key prefix* rather than a database of its own. It
writes only keys that start with its prefix, and afterwards exactly those keys are
deleted (``SCAN MATCH`` and ``UNLINK``, on every primary of a cluster). A server
storetest did not start is never flushed. A server storetest starts is in a temporary
directory on a free loopback port, with no persistence (``save ""``, ``appendonly
no``) unless the caller asks (:func:`start_server`), one per test run, shared by the
xdist workers; a cluster is three such masters with ``cluster-enabled yes`` and
explicit, free bus ports, joined by ``redis-cli --cluster create``.

redis-py is imported inside the functions that use it: importing this module loads no
driver.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from storetest._engine.servers import (
    LocalServer,
    TestRun,
    Unavailable,
    docker_engine_answers,
    free_port,
    shared_local_server,
    url_from_env,
    wait_until,
)

__all__ = [
    "HOW_TO_ENABLE",
    "HOW_TO_ENABLE_CLUSTER",
    "IMAGE",
    "RedisTarget",
    "delete_prefixed",
    "find_redis_server",
    "new_prefix",
    "provision",
    "provision_cluster",
    "start_cluster",
    "start_server",
]

#: The image started when a Docker engine answers.
IMAGE = "redis:7"

HOW_TO_ENABLE = (
    "set STORETEST_REDIS_URL to a Redis server the tests may write to (e.g. redis://127.0.0.1:6379/0; "
    "each run writes under a key prefix of its own and deletes only those keys), run a Docker engine "
    f"(testcontainers starts {IMAGE}), or install redis-server (e.g. apt-get install redis-server)"
)
HOW_TO_ENABLE_CLUSTER = (
    "set STORETEST_REDIS_CLUSTER_URL to a node of a Redis Cluster the tests may write to (each run "
    "writes under a key prefix of its own and deletes only those keys), or install redis-server and "
    "redis-cli (e.g. apt-get install redis-server): three masters are started from them"
)

#: Settings of every server started here: loopback only, nothing written to disk.
_THROWAWAY = {"bind": "127.0.0.1", "protected-mode": "no", "save": "", "appendonly": "no"}

_CLUSTER_NODES = 3


class RedisTarget(NamedTuple):
    """A throwaway Redis: the server's (or a cluster node's) URL, and the key prefix that
    is this caller's alone. Write only keys starting with ``prefix``."""

    url: str
    prefix: str


def new_prefix() -> str:
    """A key prefix nobody else uses: ``storetest:<12 hex digits>:``."""
    return f"storetest:{secrets.token_hex(6)}:"


def find_redis_server() -> str | None:
    """The ``redis-server`` binary on PATH (or in ``/usr/bin``), or ``None``."""
    found = shutil.which("redis-server")
    if found is None and os.access("/usr/bin/redis-server", os.X_OK):
        found = "/usr/bin/redis-server"
    return found


def _find_redis_cli() -> str | None:
    return shutil.which("redis-cli")


def provision(run: TestRun, prefix: str | None = None) -> Iterator[str]:
    """Yield the URL of a Redis server; when resumed, delete every key under ``prefix``
    (a fresh :func:`new_prefix` when ``None``) and stop any container.

    :raises Unavailable: no URL, no Docker engine and no ``redis-server``; the message
        says how to enable each.
    """
    prefix = _checked(prefix)
    server_url = url_from_env("redis")
    if server_url is not None:
        yield from _prefixed(server_url, prefix, cluster=False)
        return
    if docker_engine_answers():
        yield from _from_docker(prefix)
        return
    binary = find_redis_server()
    if binary is not None:
        server = shared_local_server("redis", run, lambda d: start_server(d, binary=binary))
        yield from _prefixed(server.url, prefix, cluster=False)
        return
    raise Unavailable(f"no Redis server here; {HOW_TO_ENABLE}")


def provision_cluster(run: TestRun, prefix: str | None = None) -> Iterator[str]:
    """Yield the URL of one node of a Redis Cluster (redis-py's ``RedisCluster.from_url``
    finds the rest); when resumed, delete every key under ``prefix`` on every primary.

    :raises Unavailable: no URL and no local ``redis-server``/``redis-cli``.
    """
    prefix = _checked(prefix)
    server_url = url_from_env("redis-cluster")
    if server_url is not None:
        yield from _prefixed(server_url, prefix, cluster=True)
        return
    binary, cli = find_redis_server(), _find_redis_cli()
    if binary is not None and cli is not None:
        server = shared_local_server("redis-cluster", run, lambda d: start_cluster(d, binary=binary, cli=cli))
        yield from _prefixed(server.url, prefix, cluster=True)
        return
    raise Unavailable(f"no Redis Cluster here; {HOW_TO_ENABLE_CLUSTER}")


def _checked(prefix: str | None) -> str:
    if prefix is None:
        return new_prefix()
    if not isinstance(prefix, str) or not prefix:
        # An empty prefix would make the cleanup delete every key on the server.
        raise ValueError(f"a Redis key prefix must be a non-empty string, not {prefix!r}")
    return prefix


def _prefixed(url: str, prefix: str, *, cluster: bool) -> Iterator[str]:
    _ping(url, cluster=cluster)
    try:
        yield url
    finally:
        delete_prefixed(url, prefix, cluster=cluster)


def _client(url: str, *, cluster: bool) -> Any:
    if cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url, socket_timeout=10)
    import redis

    return redis.Redis.from_url(url, socket_timeout=10)


def _ping(url: str, *, cluster: bool) -> None:
    """A named server that does not answer is a broken setup, not a reason to skip."""
    try:
        client = _client(url, cluster=cluster)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        what = "STORETEST_REDIS_CLUSTER_URL" if cluster else "Redis"
        raise RuntimeError(f"{what} at {_redacted(url)} did not answer: {type(exc).__name__}: {exc}") from exc


def _glob_escaped(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def delete_prefixed(url: str, prefix: str, *, cluster: bool = False) -> int:
    """Delete every key that starts with ``prefix`` (on every primary of a cluster), and
    nothing else; return how many were deleted.

    :raises ValueError: an empty ``prefix`` (it would match every key).
    """
    prefix = _checked(prefix)
    client = _client(url, cluster=cluster)
    deleted = 0
    try:
        nodes = client.get_primaries() if cluster else [None]
        for node in nodes:
            target = client.get_redis_connection(node) if cluster else client
            batch: list[bytes] = []
            for key in target.scan_iter(match=_glob_escaped(prefix) + "*", count=1000):
                batch.append(key)
                if len(batch) == 500:
                    deleted += _unlink(target, batch)
            deleted += _unlink(target, batch)
    finally:
        client.close()
    return deleted


def _unlink(client: Any, keys: list[bytes]) -> int:
    # One key per command: in a cluster, keys of different slots cannot share one.
    if not keys:
        return 0
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.unlink(key)
    count = sum(int(n) for n in pipe.execute())
    keys.clear()
    return count


def _redacted(url: str) -> str:
    head, at, hosts = url.rpartition("@")
    return f"{head.split('//', 1)[0]}//***@{hosts}" if at else url


def _from_docker(prefix: str) -> Iterator[str]:
    try:
        from testcontainers.redis import RedisContainer
    except ImportError:
        raise Unavailable(
            f"a Docker engine answers, but testcontainers is not installed (pip install 'storetest[docker]'); "
            f"{HOW_TO_ENABLE}"
        ) from None
    container: Any = RedisContainer(IMAGE)
    container.start()
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(6379)
        yield from _prefixed(f"redis://{host}:{port}/0", prefix, cluster=False)
    finally:
        container.stop()


def start_server(
    directory: Path,
    *,
    port: int | None = None,
    config: Mapping[str, str] | None = None,
    binary: str | None = None,
) -> LocalServer:
    """Start ``redis-server`` with its working directory ``directory`` on a loopback
    port (a free one when ``port`` is ``None``) and wait until it answers.

    No persistence unless ``config`` asks (e.g. ``{"appendonly": "yes", "appendfsync":
    "always"}``); ``config`` overrides any setting. Restarting on the same directory
    with the same settings loads what was persisted there. The caller stops it
    (``stop_local_servers`` for a registered one, or SIGTERM to ``pid``).

    :raises Unavailable: no ``redis-server``, or it exited or did not answer in 30 s.
    """
    binary = binary or find_redis_server()
    if binary is None:
        raise Unavailable(f"no redis-server binary; {HOW_TO_ENABLE}")
    directory.mkdir(parents=True, exist_ok=True)
    settings = {**_THROWAWAY, **(config or {})}
    last = ""
    # free_port() can race with another process binding the same port: try a few.
    for _attempt in range(3 if port is None else 1):
        chosen = port or free_port()
        process = _spawn(binary, directory, {"port": str(chosen), **settings})
        try:
            _wait_for(process, chosen, directory)
        except Unavailable as exc:
            last = str(exc)
            continue
        return LocalServer("redis", f"redis://127.0.0.1:{chosen}/0", process.pid, str(directory), signal.SIGTERM)
    raise Unavailable(f"could not start redis-server in {directory}: {last}")


def _spawn(binary: str, directory: Path, settings: Mapping[str, str]) -> subprocess.Popen[bytes]:
    args = [binary, "--dir", str(directory), "--logfile", str(directory / "redis.log"), "--daemonize", "no"]
    for name, value in settings.items():
        args += [f"--{name}", value]
    return subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own process group: a Ctrl-C aimed at pytest must not kill the server under
        # the other xdist workers; the plugin stops it when the run ends.
        start_new_session=True,
    )


def _wait_for(process: subprocess.Popen[bytes], port: int, directory: Path) -> None:
    import redis

    def ready() -> bool:
        if process.poll() is not None:
            raise Unavailable(f"redis-server exited with {process.returncode}: {_tail(directory / 'redis.log')}")
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        except redis.ResponseError as exc:  # "LOADING": still reading its AOF
            return "LOADING" not in str(exc)
        finally:
            client.close()

    try:
        wait_until(ready, timeout=30, what=f"redis-server on port {port}")
    except BaseException:
        if process.poll() is None:
            process.kill()
        process.wait()
        raise


def start_cluster(directory: Path, *, binary: str | None = None, cli: str | None = None) -> LocalServer:
    """Start a Redis Cluster of three masters (no replicas) under ``directory``, each with
    ``cluster-port`` set to a port found free (not the default port + 10000, which may be
    taken), join them with ``redis-cli --cluster create``, and wait until every node
    reports ``cluster_state:ok``. The result's ``url`` is the first node's.

    :raises Unavailable: a binary is missing, a node did not start, or the cluster did
        not form within 30 s.
    """
    binary = binary or find_redis_server()
    cli = cli or _find_redis_cli()
    if binary is None or cli is None:
        raise Unavailable(f"redis-server and redis-cli are both needed; {HOW_TO_ENABLE_CLUSTER}")
    nodes: list[LocalServer] = []
    try:
        for n in range(_CLUSTER_NODES):
            config = {
                "cluster-enabled": "yes",
                "cluster-port": str(free_port()),
                "cluster-config-file": "nodes.conf",
                "cluster-node-timeout": "5000",
            }
            nodes.append(start_server(directory / f"node{n}", config=config, binary=binary))
        ports = [int(node.url.rsplit(":", 1)[1].split("/")[0]) for node in nodes]
        created = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-replicas", "0",
             "--cluster-yes"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )
        if created.returncode != 0:
            raise Unavailable(f"redis-cli --cluster create failed: {(created.stdout + created.stderr).strip()[-500:]}")
        wait_until(lambda: all(_cluster_ok(p) for p in ports), timeout=30, what="the local Redis Cluster")
    except BaseException:
        for node in nodes:
            os.kill(node.pid, signal.SIGKILL)
            os.waitpid(node.pid, 0)
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return LocalServer(
        "redis-cluster", f"redis://127.0.0.1:{ports[0]}/0", nodes[0].pid, str(directory), signal.SIGTERM,
        more_pids=tuple(node.pid for node in nodes[1:]),
    )


def _cluster_ok(port: int) -> bool:
    import redis

    client: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
    try:
        info = client.execute_command("CLUSTER INFO")
    finally:
        client.close()
    if isinstance(info, dict):  # redis-py parses the reply
        return info.get("cluster_state") == "ok"
    text = info.decode() if isinstance(info, bytes) else str(info)
    return "cluster_state:ok" in text


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"
