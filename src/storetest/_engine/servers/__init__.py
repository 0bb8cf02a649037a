"""Throwaway databases for tests: ours, and any store author's.

Each backend module (``postgres``, ``mysql``, ``mongodb``) offers
``provision(run: TestRun) -> Iterator[str]``, a generator that yields the URL of a
database nobody else uses and removes it afterwards (``redis`` offers ``provision``
and ``provision_cluster``, which take the key prefix that stands in for a database:
see that module). It tries, in order:

1. ``STORETEST_<BACKEND>_URL`` names a server: make a database in it, drop it after;
2. a Docker engine answers a ping: start a container with testcontainers;
3. the server's binaries are installed: start a server in a temp dir (one per test
   run, shared by xdist workers through :func:`shared_local_server`);
4. otherwise raise :class:`Unavailable`, naming the three ways to enable the tests.

The plugin turns ``Unavailable`` into a skip, or into a failure for the backends
named in ``STORETEST_REQUIRE`` (CI sets it, so CI never goes green by skipping).
Drivers are imported inside the functions: importing this package loads none.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BACKENDS",
    "LocalServer",
    "TestRun",
    "Unavailable",
    "docker_engine_answers",
    "durable_or_refused",
    "free_port",
    "required_backends",
    "shared_local_server",
    "stop_local_servers",
    "stop_started_now",
    "url_from_env",
    "wait_until",
]

BACKENDS = ("postgres", "mysql", "mongodb", "redis", "redis-cluster")

#: A name in ``STORETEST_REQUIRE`` that requires several backends.
_REQUIRES_TOO = {"redis": {"redis-cluster"}}


class Unavailable(Exception):
    """No way to get a database of this backend here; the message says how to get one."""


@dataclass(frozen=True)
class TestRun:
    """What a provisioner needs from the test run: a private temp dir, and the dir shared
    by every xdist worker of this run (where local servers are registered)."""

    __test__ = False  # not a pytest test class, despite the name

    private_dir: Path
    shared_dir: Path


def required_backends() -> set[str]:
    """Backends named in ``STORETEST_REQUIRE`` (comma separated); ``all`` means every one,
    ``redis`` both the server and the cluster."""
    raw = os.environ.get("STORETEST_REQUIRE", "")
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    if "all" in names:
        return set(BACKENDS)
    unknown = names - set(BACKENDS)
    if unknown:
        raise ValueError(
            f"STORETEST_REQUIRE names unknown backends {sorted(unknown)}; "
            f"valid: {', '.join(BACKENDS)}, all"
        )
    return names.union(*(_REQUIRES_TOO.get(n, set()) for n in names))


def url_from_env(backend: str) -> str | None:
    """``STORETEST_<BACKEND>_URL`` (``redis-cluster``: ``STORETEST_REDIS_CLUSTER_URL``), or ``None``."""
    return os.environ.get(f"STORETEST_{backend.upper().replace('-', '_')}_URL") or None


def docker_engine_answers(timeout: float = 3.0) -> bool:
    """True when a Docker engine answers a ping. A ``docker`` client on PATH proves nothing."""
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(ready: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise Unavailable(f"{what} did not become ready within {timeout:.0f}s")
        time.sleep(0.05)


def durable_or_refused(
    databases: Iterator[str],
    *,
    durable: bool,
    server: str,
    want: Mapping[str, str],
    read: Callable[[str], dict[str, str]],
) -> Iterator[str]:
    """Yield the URL ``databases`` yields, and resume it afterwards (it drops the
    database). With ``durable``, only once the server's settings (``read(url)``) are
    ``want``: else the database is dropped and :class:`Unavailable` names the settings
    that differ, so nobody times a store on a server that keeps nothing."""
    url = next(databases)
    try:
        if durable:
            found = read(url)
            differ = {name: found.get(name) for name, value in want.items() if found.get(name) != value}
            if differ:
                raise Unavailable(
                    f"a durable {server} database was asked for, but the server has "
                    + ", ".join(f"{name}={value}" for name, value in differ.items())
                    + f" (durable means {', '.join(f'{k}={v}' for k, v in want.items())})"
                )
        yield url
    finally:
        next(databases, None)


@dataclass(frozen=True)
class LocalServer:
    """A server process started from local binaries, registered for the whole test run
    (a cluster: its first node's pid, and the other nodes' in ``more_pids``)."""

    backend: str
    url: str
    pid: int
    directory: str
    stop_signal: int = signal.SIGTERM
    more_pids: tuple[int, ...] = ()


#: The servers this process started, by pid, until it stops them: what a second Ctrl-C,
#: which exits without teardown, still stops (:func:`stop_started_now`).
_STARTED: dict[int, LocalServer] = {}


def stop_started_now() -> list[str]:
    """Send every server this process started its stop signal, without waiting; one line
    per server: stopped, or left running (with its pid and why)."""
    lines = []
    for pid, server in list(_STARTED.items()):
        for each in (pid, *server.more_pids):
            try:
                os.kill(each, server.stop_signal)
                lines.append(f"stopped the throwaway {server.backend} server (pid {each})")
            except ProcessLookupError:
                pass
            except OSError as exc:
                lines.append(f"left the throwaway {server.backend} server running (pid {each}, "
                             f"{server.directory}): {exc}")
        _STARTED.pop(pid, None)
    return lines


def _registry(shared_dir: Path) -> Path:
    return shared_dir / "storetest-local-servers.json"


@contextlib.contextmanager
def _locked(shared_dir: Path) -> Iterator[dict[str, dict[str, object]]]:
    shared_dir.mkdir(parents=True, exist_ok=True)
    with open(shared_dir / "storetest-local-servers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = _registry(shared_dir)
        servers = json.loads(path.read_text()) if path.exists() else {}
        yield servers
        path.write_text(json.dumps(servers))


def shared_local_server(
    backend: str, run: TestRun, start: Callable[[Path], LocalServer]
) -> LocalServer:
    """The local server of ``backend`` for this test run, started by the first caller.

    Under xdist every worker calls this; the file lock makes the first start the server
    and the rest reuse it, so a run starts at most one server per backend. The servers
    are stopped by :func:`stop_local_servers` when the whole run ends.
    """
    with _locked(run.shared_dir) as servers:
        known = servers.get(backend)
        if known is not None:
            server = LocalServer(**known)  # type: ignore[arg-type]
            if all(_alive(pid) for pid in (server.pid, *server.more_pids)):
                return server
            # It died mid-run: start another rather than hand out a dead URL (and stop
            # what is left of a cluster whose node died).
            for pid in (server.pid, *server.more_pids):
                _stop_process(pid, server.stop_signal)
            shutil.rmtree(server.directory, ignore_errors=True)
        server = start(run.shared_dir / f"{backend}-server")
        _STARTED[server.pid] = server
        servers[backend] = server.__dict__.copy()
        return server


def stop_local_servers(shared_dir: Path) -> list[str]:
    """Stop every server registered under ``shared_dir`` and delete its files.

    Returns one line per problem; a failure to stop one server does not stop the rest.
    """
    problems: list[str] = []
    if not _registry(shared_dir).exists():
        return problems
    with _locked(shared_dir) as servers:
        for backend, raw in list(servers.items()):
            server = LocalServer(**raw)  # type: ignore[arg-type]
            for pid in (server.pid, *server.more_pids):
                try:
                    _stop_process(pid, server.stop_signal)
                except Exception as exc:
                    problems.append(f"could not stop the local {backend} server (pid {pid}): {exc}")
            shutil.rmtree(server.directory, ignore_errors=True)
            _STARTED.pop(server.pid, None)
            del servers[backend]
    return problems


def _stop_process(pid: int, sig: int, timeout: float = 30.0) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            # Reap it if it is our child; otherwise just probe whether it still exists.
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
        except ChildProcessError:
            if not _alive(pid):
                return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    # Not our child (an xdist worker started it): a zombie nobody has reaped yet is
    # as good as gone, though kill(pid, 0) still finds it.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")
