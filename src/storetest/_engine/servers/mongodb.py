"""A throwaway MongoDB database: from ``STORETEST_MONGODB_URL``, a Docker container, or a
local ``mongod``; otherwise :class:`~storetest._engine.servers.Unavailable`.

mongomock, montydb and the like run inside the Python process and are not MongoDB: a
suite that passes against them says nothing about a real server, so they are never
offered here as a way to "have" MongoDB.
"""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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

__all__ = ["HOW_TO_ENABLE", "IMAGE", "fresh_database_url", "provision"]

#: The image started when a Docker engine answers.
IMAGE = "mongo:7"

#: How long to wait for a server named by ``STORETEST_MONGODB_URL`` to answer, unless the
#: URL sets ``serverSelectionTimeoutMS`` itself.
SERVER_SELECTION_TIMEOUT_MS = 10_000

HOW_TO_ENABLE = (
    "set STORETEST_MONGODB_URL=mongodb://HOST:PORT to a server the tests may create and "
    "drop databases in, or run a Docker engine (testcontainers starts "
    f"{IMAGE}), or put a mongod binary on PATH. mongomock results are a fake, not "
    "MongoDB: they do not show that a store works on a real server"
)


def fresh_database_url(base: str, name: str) -> str:
    """``base`` with its database replaced by ``name``, every option kept.

    Credentials in a MongoDB URL authenticate against the URL's database unless
    ``authSource`` says otherwise, so when ``base`` has credentials and no ``authSource``
    the database they belonged to (``admin`` when none was named) is kept as ``authSource``.

    :raises ValueError: ``base`` is not a ``mongodb://`` or ``mongodb+srv://`` URL.
    """
    parts = urlsplit(base)
    if parts.scheme not in ("mongodb", "mongodb+srv") or not parts.netloc:
        raise ValueError(f"not a mongodb:// or mongodb+srv:// URL: {_redacted(base)}")
    query = parts.query  # kept verbatim: re-encoding could change an option's value
    keys = {k.lower() for k, _ in parse_qsl(query, keep_blank_values=True)}
    if "@" in parts.netloc and "authsource" not in keys:
        extra = urlencode({"authSource": parts.path.lstrip("/") or "admin"})
        query = f"{query}&{extra}" if query else extra
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", query, ""))


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    hosts = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{hosts}", parts.path, parts.query, parts.fragment))


def _client(url: str) -> Any:
    import pymongo

    options: dict[str, Any] = {}
    if "serverselectiontimeoutms" not in url.lower():
        options["serverSelectionTimeoutMS"] = SERVER_SELECTION_TIMEOUT_MS
    return pymongo.MongoClient(url, **options)


def _fresh_name() -> str:
    return f"storetest_{secrets.token_hex(6)}"


def _from_server(base: str) -> Iterator[str]:
    """A new database in the server ``base`` names; dropped after the yield."""
    from pymongo.errors import PyMongoError

    name = _fresh_name()
    url = fresh_database_url(base, name)
    client = _client(url)
    try:
        try:
            client.admin.command("ping")
        except PyMongoError as exc:
            raise RuntimeError(
                f"STORETEST_MONGODB_URL names {_redacted(base)}, but no MongoDB server "
                f"answered there: {type(exc).__name__}: {exc}"
            ) from exc
        yield url
        client.drop_database(name)
    finally:
        client.close()


def _from_docker() -> Iterator[str]:
    try:
        from testcontainers.community.mongodb import MongoDbContainer
    except ImportError:
        try:  # testcontainers before the community split
            from testcontainers.mongodb import MongoDbContainer
        except ImportError:
            raise Unavailable(
                "a Docker engine answers, but testcontainers is not installed "
                "(pip install 'storetest[docker]'); " + HOW_TO_ENABLE
            ) from None

    container = MongoDbContainer(IMAGE)
    container.start()
    try:
        yield fresh_database_url(container.get_connection_url(), _fresh_name())
    finally:
        container.stop()


def _start_mongod(directory: Path) -> LocalServer:
    mongod = shutil.which("mongod")
    assert mongod is not None
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        [
            mongod,
            "--dbpath", str(data),
            "--port", str(port),
            "--bind_ip", "127.0.0.1",
            "--nounixsocket",
            "--quiet",
            "--logpath", str(directory / "mongod.log"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"mongodb://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise Unavailable(
                f"mongod exited with status {process.returncode}; see {directory / 'mongod.log'}"
            )
        client = _client(url + "/?serverSelectionTimeoutMS=200")
        try:
            client.admin.command("ping")
            return True
        except Exception:
            return False
        finally:
            client.close()

    try:
        wait_until(ready, timeout=60, what=f"mongod on port {port}")
    except BaseException:
        process.kill()
        process.wait()
        raise
    return LocalServer("mongodb", url, process.pid, str(directory), signal.SIGTERM)


def _from_local_binary(run: TestRun) -> Iterator[str]:
    server = shared_local_server("mongodb", run, _start_mongod)
    name = _fresh_name()
    client = _client(server.url)
    try:
        yield fresh_database_url(server.url, name)
        client.drop_database(name)
    finally:
        client.close()


def provision(run: TestRun) -> Iterator[str]:
    """Yield ``mongodb://HOST:PORT/storetest_<random>``, a database nobody else uses, and
    remove it when resumed after the yield.

    Tries ``STORETEST_MONGODB_URL``, then a Docker engine, then ``mongod`` on PATH.

    :raises Unavailable: none of the three is there (the message says how to enable one).
    :raises RuntimeError: ``STORETEST_MONGODB_URL`` is set but no server answers there;
        a named server that is down is a broken setup, not a reason to skip.
    """
    base = url_from_env("mongodb")
    if base is not None:
        yield from _from_server(base)
    elif docker_engine_answers():
        yield from _from_docker()
    elif shutil.which("mongod") is not None:
        yield from _from_local_binary(run)
    else:
        raise Unavailable(f"no MongoDB server here; {HOW_TO_ENABLE}")
