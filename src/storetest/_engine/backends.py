"""What a clause needs beyond one handle on one backend: a *fresh* backend (a new
directory, a new database on the same server) with several handles opened on it at
once, and handles opened in *child processes*: forked by the run's fork server
(:mod:`storetest._engine.forking`), which holds the factory itself, or where fork is
not used, spawned, importing the factory by name.

A fresh backend is for clauses about first calls: tables created, the first session
row inserted, by several handles arriving together. Each fixture value storetest
provisions is replaced by a new one of its kind (``tmp_path`` by a new directory, a
database URL by a new database on the same server); a value the caller supplied that
storetest does not know is passed on unchanged.

A forked child inherits the factory; a spawned one starts from nothing: the factory
travels as ``module:function``. Either way the fixtures travel as values (paths and
URLs), and each child opens its handle with :func:`storetest._engine.harness.open_target`,
waits at a barrier shared with its siblings, then runs the clause's workload, a
function named ``module:function``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import queue
import secrets
import select
import signal
import socket
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from storetest._engine import forking, stops
from storetest._engine.crashing import Zygote, alive, death
from storetest._engine.crashing import resolve as _resolve
from storetest._engine.harness import Handle, Target, close_factory, enter_factory, open_target

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["ChildDied", "SpawnError", "fresh_fixtures", "handles_on_one_backend", "open_handles", "run_in_processes",
           "shared_connections", "spawn_reference"]

#: Seconds a child may take to start, open its handle and run its workload.
CHILD_TIMEOUT: Final = 120.0

_NOT_IMPORTABLE: Final = (
    "the {label} {name} cannot be opened in a child process: child processes are spawned here ({why}) "
    "and import their factory as module:function, so it must be a function defined at the top level "
    "of an importable module (not a lambda or a nested function); on a platform with fork, unset "
    "STORETEST_CHILDREN and any factory works"
)


class SpawnError(TypeError):
    """A factory cannot be opened in a child process (a lambda, a nested function)."""


class ChildDied(RuntimeError):
    """A child process exited before running any of storetest's code in it, so before
    the store was opened: the clause did not run (an error, not the store's failure)."""


_DIED: Final = (
    "child process {k} exited with code {code} before it started: the clause did not run (a spawned child "
    "imports the parent's __main__ first, which a script read from stdin or `python -c` cannot give; "
    "its error is on stderr)"
)


@contextlib.contextmanager
def fresh_fixtures(fixtures: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """``fixtures`` with every value storetest provisions replaced by a fresh one of its
    kind, removed afterwards: ``tmp_path`` a new directory, ``storetest_postgres_url``,
    ``storetest_mysql_url`` and ``storetest_mongodb_url`` a new database on the same server,
    ``storetest_redis_prefix`` a new key prefix under the run's."""
    from storetest._engine.servers import mongodb, mysql, postgres

    fresh: dict[str, Callable[[str], Any]] = {
        "storetest_postgres_url": contextlib.contextmanager(postgres._fresh_database),
        "storetest_mysql_url": mysql._fresh_database,
        "storetest_mongodb_url": contextlib.contextmanager(mongodb._from_server),
    }
    out = dict(fixtures)
    with contextlib.ExitStack() as stack:
        for name, value in fixtures.items():
            if name == "tmp_path":
                out[name] = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="storetest-fresh-")))
            elif name in fresh and isinstance(value, str):
                out[name] = stack.enter_context(fresh[name](value))
            elif name == "storetest_redis_prefix" and isinstance(value, str):
                # Under the run's own prefix, so the run's cleanup deletes these keys too.
                out[name] = f"{value}fresh-{secrets.token_hex(4)}:"
        yield out


@contextlib.asynccontextmanager
async def open_handles(t: Target, fixtures: Mapping[str, Any], n: int) -> Any:
    """``n`` handles from the run's factory on ``fixtures``, all opened before any is
    used; closed afterwards, newest first, every one tried."""
    assert t.factory is not None, "the target was opened without its factory"
    closers: list[Any] = []
    handles: list[Handle] = []
    try:
        for k in range(n):
            store = await enter_factory(f"handle {k}", t.factory, fixtures, closers)
            handles.append(Handle(store, f"handle {k}", t.errors))
        yield handles
    finally:
        errors = []
        for _, closer in reversed(closers):
            try:
                await close_factory(closer)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


@contextlib.contextmanager
def handles_on_one_backend(t: Target, n: int) -> Iterator[Sequence[Handle]]:
    """``n`` handles on the clause's own backend, each from a factory call of its own,
    for races of ``n`` callers that must not share a handle (a per-handle lock excludes
    only its own handle's callers); closed afterwards. Without a replica the factory does
    not promise that two calls reach one backend: the clause's own handles, then."""
    if t.replica is None or t.factory is None:
        yield t.handles()
        return
    opened = open_handles(t, t.fixtures, n)
    handles = t.run(opened.__aenter__())
    try:
        yield handles
    finally:
        t.run(opened.__aexit__(None, None, None))


def spawn_reference(factory: Callable[..., Any], label: str = "factory") -> tuple[str, str]:
    """How a child process finds ``factory``: ``("module:function", wrapper)``, where
    ``wrapper`` (``module:function`` or ``""``) rebuilds a binding around it (an
    :func:`~storetest.item_sessions` factory travels as its outer factory).

    :raises SpawnError: ``factory`` is a lambda or a nested function.
    """
    wrapper = ""
    inner = getattr(factory, "storetest_spawn", None)
    if inner is not None:
        factory, wrap = inner
        wrapper = f"{wrap.__module__}:{wrap.__qualname__}"
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    why = forking.unavailable() or "the factory is not held by a fork server"
    if not module or not name or "<" in name or module == "__main__":
        raise SpawnError(_NOT_IMPORTABLE.format(label=label, name=f"{module}:{name}" if module else repr(factory),
                                                why=why))
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    if found is not factory:
        raise SpawnError(_NOT_IMPORTABLE.format(label=label, name=f"{module}:{name}", why=why))
    return f"{module}:{name}", wrapper


def run_in_processes(t: Target, workload: Callable[..., Any], arguments: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Run ``workload(target, *args)`` in one child process per ``args`` (forked by the
    fork server holding the factory, else spawned), each on its own handle from the
    run's factory and fixtures, all started together (a barrier after every child has
    opened its handle); their results, in order.

    :raises SpawnError: spawned, the factory or the workload cannot be imported by a child.
    :raises RuntimeError: a child failed outside the workload, or timed out.
    """
    assert t.factory is not None
    work, _ = spawn_reference(workload, "workload")
    server = forking.server_for(t.factory)
    if server is not None:
        return _run_forked(*server, t, work, arguments)
    factory = spawn_reference(t.factory)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(arguments))
    results = context.Queue()
    watch = stops.current()
    children = [
        context.Process(target=_child, name=f"storetest-child-{k}", args=(
            k, factory, dict(t.fixtures), work, args, t.clause, t.profile, t.seed, t.nonce, t.tag, watch.timeout,
            barrier, results))
        for k, args in enumerate(arguments)
    ]
    for child in children:
        child.start()
    try:
        out: dict[int, Any] = {}
        waiting = _waiting(watch.timeout)
        deadline = time.monotonic() + waiting
        dead: dict[int, float] = {}  # children seen exited without an answer, and when
        while len(out) < len(children):
            if watch.interrupted:
                raise stops.Interrupt  # Ctrl-C stops the clause here too
            try:
                k, ok, value = results.get(timeout=0.2)
            except queue.Empty:
                now = time.monotonic()
                if now > deadline:
                    raise RuntimeError(f"no answer from a child process within {waiting:g} s") from None
                for k, child in enumerate(children):
                    if k not in out and child.exitcode is not None:
                        # An answer is flushed before its child exits; allow a moment for it.
                        if now - dead.setdefault(k, now) > 2.0:
                            raise ChildDied(_DIED.format(k=k, code=child.exitcode)) from None
                continue
            if not ok:
                raise RuntimeError(value)
            out[k] = value
        return [out[k] for k in range(len(children))]
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join()


def _run_forked(server: Zygote, key: int, t: Target, work: str, arguments: Sequence[tuple[Any, ...]]) -> list[Any]:
    """:func:`run_in_processes` with children forked by ``server``: each connects to a
    socket here, says when its handle is open, is told to go once all are, and sends
    its result on the same connection."""
    from multiprocessing.connection import Connection  # only when children are forked

    watch = stops.current()
    n = len(arguments)
    with tempfile.TemporaryDirectory(prefix="storetest-children-") as directory:
        address = str(Path(directory) / "children")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conns: list[Connection] = []
        pids: list[int] = []
        reaped: set[int] = set()
        finished = False
        try:
            listener.bind(address)
            listener.listen(n)
            for k, args in enumerate(arguments):
                pids.append(server.fork(_FORKED_CHILD, (k, address, dict(t.fixtures), work, args, t.clause, t.profile,
                                                        t.seed, t.nonce, t.tag, watch.timeout), key))
            out: dict[int, Any] = {}
            ready: set[int] = set()
            waiting = _waiting(watch.timeout)
            deadline = time.monotonic() + waiting
            dead: dict[int, float] = {}  # children seen ended without an answer, and when
            while len(out) < n:
                if watch.interrupted:
                    raise stops.Interrupt  # Ctrl-C stops the clause here too
                waitables: list[Any] = [listener, *conns]
                readable, _, _ = select.select(waitables, [], [], 0.2)
                for r in readable:
                    if r is listener:
                        conns.append(Connection(listener.accept()[0].detach()))
                        continue
                    try:
                        message = r.recv()
                    except (EOFError, OSError):
                        conns.remove(r)
                        continue
                    if message[0] == "ready":
                        ready.add(message[1])
                        if len(ready) == n:
                            for conn in conns:
                                conn.send("go")
                    else:
                        _, k, ok, value = message
                        if not ok:
                            raise RuntimeError(value + _shared_sockets(server))
                        out[k] = value
                if readable:
                    continue
                now = time.monotonic()
                if now > deadline:
                    raise RuntimeError(f"no answer from a child process within {waiting:g} s")
                for k, pid in enumerate(pids):
                    if k not in out and not alive(pid):
                        # An answer is sent before its child ends; allow a moment for it.
                        if now - dead.setdefault(k, now) > 2.0:
                            reaped.add(pid)
                            raise RuntimeError(f"child process {k} ended ({death(server.reap(pid))}) without an "
                                               f"answer: the store's code or its driver ended the process"
                                               + _shared_sockets(server))
            finished = True
            return [out[k] for k in range(n)]
        finally:
            for conn in conns:
                conn.close()  # a child still waiting to go sees the end, and ends
            listener.close()
            give = time.monotonic() + (10.0 if finished else 0.0)
            for pid in pids:
                while alive(pid) and time.monotonic() < give:
                    time.sleep(0.01)
                with contextlib.suppress(ProcessLookupError):
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)
                if pid not in reaped:
                    with contextlib.suppress(RuntimeError):
                        server.reap(pid)


def shared_connections(made: Any) -> str:
    """For a child's error: the connections the fork server holding ``made`` inherited
    from this process (a child shares them with it), and the fix; "" if none."""
    found = forking.server_for(made)
    return _shared_sockets(found[0]) if found else ""


def _shared_sockets(server: Zygote) -> str:
    if not server.sockets:
        return ""
    return (f" (the child was forked from this process, which had connections open before the run "
            f"({server.sockets}): a store or pool made before check() or at a test module's import is shared "
            "with the child, and both using it garbles it; make connections inside the factory, or set "
            "STORETEST_CHILDREN=spawn and give a factory defined at the top level of a module)")


def _waiting(call_timeout: float) -> float:
    """How long the parent waits for its children, and they for each other: a child's
    calls each have the run's deadline, which may be above :data:`CHILD_TIMEOUT`."""
    return max(CHILD_TIMEOUT, 2 * call_timeout)


def _child(k: int, factory: tuple[str, str], fixtures: dict[str, Any], work: str, args: tuple[Any, ...],
           clause: str, profile: Any, seed: int, nonce: str, tag: str, timeout: float, barrier: Any,
           results: Any) -> None:
    try:
        made = _resolve(factory[0])
        if factory[1]:
            made = _resolve(factory[1])(made)
        with stops.watching(stops.Watch(timeout), interrupts=False), \
                open_target(clause, made, None, fixtures, profile, seed, nonce, tag) as t:
            barrier.wait(timeout=_waiting(timeout))
            results.put((k, True, t.supervised(lambda: _resolve(work)(t, *args))))
    except BaseException as exc:  # reported to the parent, whatever it was
        results.put((k, False, _failure(k, exc)))


def _failure(k: int, exc: BaseException) -> str:
    if isinstance(exc, stops.StuckCall):  # the store's call, named as in this process; where it hung is not ours
        return f"in child process {k}, {exc}"
    return (f"child process {k} failed: " + "".join(traceback.format_exception_only(exc)).strip()
            + "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:]))


_FORKED_CHILD: Final = f"{__name__}:_forked_child"


def _forked_child(made: Any, k: int, address: str, fixtures: dict[str, Any], work: str, args: tuple[Any, ...],
                  clause: str, profile: Any, seed: int, nonce: str, tag: str, timeout: float) -> None:
    """In a child forked by the fork server (``made`` the factory itself): as
    :func:`_child`, the barrier and the answer through a connection to the parent."""
    from multiprocessing.connection import Connection

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    conn = Connection(sock.detach())
    try:
        with stops.watching(stops.Watch(timeout), interrupts=False), \
                open_target(clause, made, None, fixtures, profile, seed, nonce, tag) as t:
            conn.send(("ready", k))
            if not conn.poll(_waiting(timeout)):
                raise RuntimeError(f"its siblings did not open their handles within {_waiting(timeout):g} s")
            conn.recv()  # "go"; at the parent's end (it gave up), EOFError
            conn.send(("done", k, True, t.supervised(lambda: _resolve(work)(t, *args))))
    except BaseException as exc:  # reported to the parent, whatever it was
        with contextlib.suppress(OSError):
            conn.send(("done", k, False, _failure(k, exc)))
