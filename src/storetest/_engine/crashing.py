"""Child processes to kill: a *zygote* forks one child per life on request. It is
either the run's fork server (:mod:`storetest._engine.forking`: a fork of the process
made before the clauses ran, holding the factory objects themselves, lambdas included)
or, where fork is not used, a process spawned once per ``reopen`` factory that imports
its module (and so the store and its driver). A child starts clean (the zygote has no threads, no event loop, no
connection: only imports) and costs a fork, not an interpreter start, so a clause can
kill dozens of them in seconds.

A child tells the parent what it does through a FIFO, one JSON line per record, each
written with one ``write`` of under ``PIPE_BUF`` bytes, so a kill never cuts one short:
``R`` once its store is open, ``B`` before each call, ``A`` after it returned (the
acknowledgement), ``U`` if it raised ``OutcomeUnknown``, ``E`` if it raised anything else.

The parent kills a child with SIGKILL at a random moment inside a chosen call; or,
when the data is in a directory, the kernel kills it at a random byte of a write: the
child sets ``RLIMIT_FSIZE`` and restores ``SIGXFSZ``'s default action (Python ignores
it), so the write that reaches the limit lands in part and the process dies at once.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import select
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["Life", "Zygote", "alive", "death", "open_sockets", "record", "resolve"]

#: Seconds a child may take to open its store, or the zygote to start.
START_TIMEOUT: Final = 120.0


def record(fd: int, kind: str, n: int, **fields: Any) -> None:
    """One record to the parent, in one ``write``."""
    os.write(fd, (json.dumps({"k": kind, "n": n, **fields}, separators=(",", ":")) + "\n").encode())


@dataclass
class Life:
    """What one child did before it died: its records, and how it died."""

    records: list[dict[str, Any]] = field(default_factory=list)
    #: "SIGKILL", "SIGXFSZ" (a write reached the file-size limit), or how else it ended.
    death: str = ""

    def acked(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["k"] == "A"]

    def in_flight(self) -> dict[str, Any] | None:
        """The call begun and never acknowledged (or ended by ``OutcomeUnknown`` or an
        error): its outcome is unknown. The child makes one call at a time."""
        begun = [r for r in self.records if r["k"] == "B"]
        if not begun:
            return None
        last = begun[-1]["n"]
        return None if any(r["k"] == "A" and r["n"] == last for r in self.records) else begun[-1]

    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["k"] == "E"]

    def unknown(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["k"] == "U"]


_SHARED: dict[tuple[str, str], Zygote] = {}
_SHARED_LOCK = threading.Lock()


class Zygote:
    """A process that forks children on request, each running ``work(made, *args)``
    with ``made`` one of the objects it holds (by key): spawned, it has imported
    ``reference`` (``module:function``, and a wrapper rebuilding a binding around it)
    and holds it under key 0; forked (``reference`` None), it holds ``objects`` as they
    were in this process at the fork, under their ``id()``."""

    @classmethod
    def shared(cls, reference: tuple[str, str]) -> Zygote:
        """The one zygote of this process for ``reference``, started on first use: a
        run of many crash clauses pays the interpreter start once. It ends with this
        process (a daemon)."""
        with _SHARED_LOCK:
            zygote = _SHARED.get(reference)
            if zygote is None or zygote.broken or not zygote.process.is_alive():
                zygote = _SHARED[reference] = cls(reference)
            return zygote

    def __init__(self, reference: tuple[str, str] | None, objects: Sequence[Any] = (),
                 name: str = "the crash clauses' helper process") -> None:
        self.name = name
        #: What the forked server holds (kept alive here, so no id() is reused meanwhile).
        self.objects = {id(o): o for o in objects}
        # One question and its answer at a time: a crash clause left in a call by a
        # runner's timeout may still ask while the next test's crash clause does.
        self._asking = threading.Lock()
        #: It stopped answering, or its pipe broke: killed, never asked again.
        self.broken = False
        self.process: multiprocessing.process.BaseProcess
        if reference is not None:
            spawn = multiprocessing.get_context("spawn")
            self.conn, theirs = spawn.Pipe()
            self.process = spawn.Process(target=_zygote, args=(theirs, reference), daemon=True,
                                         name="storetest-crash-zygote")
        else:  # forked: the objects reach it in memory, never pickled
            fork = multiprocessing.get_context("fork")
            self.conn, theirs = fork.Pipe()
            self.process = fork.Process(target=_forked, args=(theirs, self.conn, self.objects), daemon=True,
                                        name="storetest-fork-server")
        self.process.start()
        theirs.close()
        if not self.conn.poll(START_TIMEOUT):
            self.close()
            raise RuntimeError(f"{self.name} did not start within {START_TIMEOUT:g} s")
        ok, why = self.conn.recv()
        if not ok:
            self.close()
            raise RuntimeError(f"{self.name} could not import the reopen factory: {why}")
        #: Sockets this process had open at the fork (a connection or pool made before the
        #: run): a forked child shares them with this process.
        self.sockets: str = why

    def fork(self, work: str, args: tuple[Any, ...], key: int = 0) -> int:
        """A child running ``work(objects[key], *args)``; its pid. Reap it with :meth:`reap`."""
        pid: int = self._ask("fork", work, args, key)
        return pid

    def reap(self, pid: int) -> int:
        """Wait for child ``pid`` to end; its wait status."""
        status: int = self._ask("reap", pid)
        return status

    def close(self) -> None:
        with self._asking:
            with contextlib.suppress(OSError, EOFError):
                self.conn.send(("exit",))
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
            self.conn.close()

    def _ask(self, *message: Any) -> Any:
        with self._asking:
            if not self.broken:
                try:
                    self.conn.send(message)
                    if self.conn.poll(START_TIMEOUT):
                        return self.conn.recv()
                except (OSError, EOFError):
                    pass
                # A late answer must not reach a later question: the next crash clause
                # starts a new zygote (shared() sees this one broken).
                self.broken = True
                self.process.kill()
                self.process.join(timeout=10)
            raise RuntimeError(f"{self.name} stopped answering")

    @contextlib.contextmanager
    def child(self, work: str, args: tuple[Any, ...], key: int = 0) -> Iterator[_Child]:
        """A forked child running ``work(made, fifo, *args)``; killed and reaped when
        the block ends, whatever happened."""
        with tempfile.TemporaryDirectory(prefix="storetest-crash-") as directory:
            fifo = str(Path(directory) / "records")
            os.mkfifo(fifo, 0o600)
            read = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            # Ours, so the FIFO shows no end of file before the child has opened it.
            hold = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            try:
                pid = self.fork(work, (fifo, *args), key)
                child = _Child(pid, read)
                try:
                    yield child
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    status = self.reap(pid)
                    child.life.death = death(status)
                    os.close(hold)
                    hold = -1
                    child.drain(until_eof=True)
            finally:
                if hold >= 0:
                    os.close(hold)
                os.close(read)


class _Child:
    def __init__(self, pid: int, read: int) -> None:
        self.pid = pid
        self.read = read
        self.life = Life()
        self._partial = b""
        self.seen: dict[tuple[str, int], float] = {}

    def drain(self, timeout: float = 0.0, until_eof: bool = False) -> bool:
        """Read what has arrived (waiting up to ``timeout`` for something); ``False``
        at end of file."""
        while True:
            ready, _, _ = select.select([self.read], [], [], timeout)
            if not ready:
                return True
            data = os.read(self.read, 65536)
            if not data:
                return False
            now = time.monotonic()
            lines = (self._partial + data).split(b"\n")
            self._partial = lines.pop()
            for line in lines:
                r = json.loads(line)
                self.life.records.append(r)
                self.seen.setdefault((r["k"], r["n"]), now)
            timeout = 0.0 if not until_eof else 1.0

    def wait_for(self, kind: str, n: int, timeout: float) -> float | None:
        """Until the child has sent record ``kind`` for call ``n``: when it arrived; or
        ``None`` if it timed out, the child ended, or it sent ``E`` or ``U`` first."""
        deadline = time.monotonic() + timeout
        while (kind, n) not in self.seen:
            if any(k in ("E", "U") for k, _ in self.seen):
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.drain(min(left, 0.05))
            if (kind, n) not in self.seen and not self.alive():
                self.drain()
                return self.seen.get((kind, n))
        return self.seen[(kind, n)]

    def wait_for_death(self, timeout: float) -> bool:
        """Whether the child died by itself within ``timeout`` (records read meanwhile)."""
        deadline = time.monotonic() + timeout
        while self.alive():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.drain(min(left, 0.02))
        return True

    def alive(self) -> bool:
        return alive(self.pid)


def alive(pid: int) -> bool:
    """Whether child ``pid`` of a zygote has not ended (ended, a zombie until reaped)."""
    try:
        os.kill(pid, 0)  # a zombie answers too: the zygote reaps it when asked
    except ProcessLookupError:
        return False
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return True  # no /proc: assume alive, the kill at the end settles it


def death(status: int) -> str:
    """How a process ended, from its wait status: a signal's name, or its exit status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
    return f"exit status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else f"status {status}"


def resolve(reference: str) -> Any:
    """The object a child finds by ``module:qualname``."""
    module, _, name = reference.partition(":")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


def _zygote(conn: Any, reference: tuple[str, str]) -> None:
    try:
        made = resolve(reference[0])
        if reference[1]:
            made = resolve(reference[1])(made)
    except BaseException as exc:  # said to the parent, whatever it was
        conn.send((False, f"{type(exc).__name__}: {exc}"))
        return
    conn.send((True, ""))
    _serve(conn, {0: made})


def _forked(conn: Any, ours: Any, objects: dict[int, Any]) -> None:
    # The parent's end, inherited: closed, so the parent's death reads here as the end.
    ours.close()
    # Ctrl-C reaches the terminal's whole process group: the parent stops and kills the
    # children it asked for; this process ends with it (a daemon) or when asked.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn.send((True, open_sockets()))
    _serve(conn, objects)


def open_sockets() -> str:
    """The peers of the network sockets this process has open, "" if none (or no /proc)."""
    import socket

    peers = []
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                    continue
                s = socket.socket(fileno=os.dup(int(name)))
                try:
                    peer = s.getpeername() if s.type == socket.SOCK_STREAM else None
                    if s.family in (socket.AF_INET, socket.AF_INET6) and peer:
                        peers.append(f"{peer[0]}:{peer[1]}")
                    elif s.family == socket.AF_UNIX and peer:
                        peers.append(str(peer))
                finally:
                    s.close()
    return ", ".join(sorted(set(peers)))


def _serve(conn: Any, objects: dict[int, Any]) -> None:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "fork":
            _, work, args, key = message
            pid = os.fork()
            if pid == 0:  # the child: never returns into multiprocessing
                code = 0
                try:
                    conn.close()
                    resolve(work)(objects[key], *args)
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            conn.send(pid)
        elif message[0] == "reap":
            _, status = os.waitpid(message[1], 0)
            conn.send(status)
        else:
            return
