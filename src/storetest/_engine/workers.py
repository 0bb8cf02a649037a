"""A run's clauses shared among processes: ``storetest check`` forks ``jobs - 1``
workers at the start of :func:`storetest.check`, before it starts a thread or calls a
factory, and each process takes the next clause not yet taken until none is left, the
dearest first (``Clause.cost``: a state machine taken last ran on in one process while
the other waited). The clauses that race threads or kill processes come last, in the
parent alone, once every worker has ended: their threads yield to each other at every
line of the store's code and want both CPUs (beside a busy process, the default
check's races took four times as long: ``benchmarks/race_beside.py``).

Each clause runs as it would alone: on a store of its own, with the run's seed and
nonce, so its inputs and sessions are the same whichever process takes it. A worker
sends back, over a pipe, each clause it takes, each verdict as it ends, its progress,
and at the end what it learned of the store; the parent calls the caller's
``progress`` for it and assembles one report, in clause order. A clause taken and never
answered for (the worker died) is reported as an error saying how the worker ended.
Where one process stops (the factory failed, Ctrl-C), the others take no more clauses;
the clause each had in flight then has its own verdict, where one process would have
left it not reached.

Used only where sharing is safe (:func:`refusal`): fork exists, the factories keep
their data in the ``tmp_path`` each clause gets (two processes' clauses never meet in
one database), no network connection is open (one made before the run would be shared
by both processes), and the caller's process runs no other thread (a fork copies no
thread, but every lock one holds).

A worker has a process group of its own, so the terminal's Ctrl-C reaches the parent
alone, which passes it on (:attr:`storetest._engine.stops.Watch.workers`); it dies with
the parent (Linux's ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, NoReturn

from storetest._engine import forking
from storetest._engine.crashing import open_sockets
from storetest._engine.harness import parameter_names

__all__ = ["ENVIRONMENT", "Team", "auto_jobs", "refusal"]

#: Sets the number of processes ``storetest check`` runs clauses in when ``--jobs`` is
#: not given (``1`` for one process).
ENVIRONMENT: Final = "STORETEST_JOBS"

_HEADER: Final = struct.Struct("!I")


def auto_jobs() -> int:
    """How many processes ``storetest check`` uses by default: two where the machine
    has two CPUs or more for this process, else one."""
    return 2 if _cpus() >= 2 else 1


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def refusal(factories: Iterable[Callable[..., Any] | None], fixtures: object) -> str:
    """Why this run's clauses must stay in one process, or "" if they may be shared."""
    why = forking.unavailable()
    if why:
        return why
    if fixtures is not None:
        return "the caller supplies the factories' parameters"
    names = {n for f in factories if f is not None for n in parameter_names(f) if n != "primary"}
    if names != {"tmp_path"}:
        others = sorted(names - {"tmp_path"})
        return ("the factory takes " + ", ".join(others) + ": two processes' clauses could meet in one "
                "database" if others else
                "the factory takes no tmp_path: its data may be anywhere, and two processes' clauses "
                "could meet there")
    sockets = open_sockets()
    if sockets:
        return f"this process has network connections open ({sockets}), which a fork would share"
    threads = _threads()
    if threads > 1:
        return (f"{threads - 1} other thread(s) run in this process (a fork copies none of them, but any lock "
                "one holds)")
    return ""


def _threads() -> int:
    """The threads of this process: the kernel's count where there is one (a C
    library's own threads too), else Python's."""
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/task"))
    return threading.active_count()


class Team:
    """The processes sharing one run: this one, and ``jobs - 1`` workers forked now.
    In a worker, :attr:`worker` is true and the run must end with :meth:`finish`."""

    def __init__(self, jobs: int, shared: Sequence[int], alone: Sequence[int]) -> None:
        #: The positions any process may take, in the order they are taken, then those
        #: this one runs once the workers have ended.
        self.shared = list(shared)
        self.alone = list(alone)
        self._ended: list[tuple[int, str]] | None = None
        self._join: Callable[[], list[tuple[int, str]]] = list
        self.worker = False
        self.parent = os.getpid()
        fork = multiprocessing.get_context("fork")
        # In shared memory: how many shared positions were taken, and whether a process
        # saw the factory fail (then the others take no more clauses, as one process
        # stops at the first such failure).
        self._next = fork.Value("i", 0)
        self._stop = fork.Value("b", 0, lock=False)
        self._out = -1
        self._sending = threading.Lock()
        #: In the parent: (pid, read end of its pipe) per worker.
        self.workers: list[tuple[int, int]] = []
        #: In the parent: what a relay thread's ``on_message`` raised (the caller's
        #: ``progress``), raised again by :meth:`ended` in the thread that waits.
        self.errors: list[BaseException] = []
        # In the parent, per worker: the positions it said it took, and its last words
        # ("end": what it learned of the store; "raised": why its run stopped).
        self._took: dict[int, list[int]] = {}
        self._last: dict[int, dict[str, Any]] = {}
        try:
            for _ in range(jobs - 1):
                read, write = os.pipe()
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    os.close(read)
                    for _, fd in self.workers:
                        os.close(fd)
                    self.workers = []
                    self.worker = True
                    self._out = write
                    _become_worker(self.parent)
                    return
                os.close(write)
                self.workers.append((pid, read))
        except BaseException:
            self.abandon()
            raise

    @property
    def pids(self) -> list[int]:
        return [pid for pid, _ in self.workers]

    def positions(self) -> Iterator[int]:
        """The positions (in the run's order) of the clauses this process takes, one at
        a time, as it is ready for the next: shared ones first; then, in the parent, once
        every worker has ended, the ones that run alone."""
        while True:
            with self._next.get_lock():
                taken = self._next.value
                self._next.value = taken + 1
            if taken >= len(self.shared):
                break
            if self.worker:
                self.send("took", self.shared[taken])
            yield self.shared[taken]
        if not self.worker:
            self.ended()
            yield from self.alone

    def ended(self) -> list[tuple[int, str]]:
        """In the parent: wait for every worker to end; each one's pid and how it ended
        ("" for a normal exit). Raises what a relay thread's ``on_message`` raised."""
        if self._ended is None:
            self._ended = self._join()
        if self.errors:
            raise self.errors[0]
        return self._ended

    def stop(self) -> None:
        """The factory failed here: no process takes another clause."""
        self._stop.value = 1

    def stopped(self) -> bool:
        """Whether a process saw the factory fail."""
        return bool(self._stop.value)

    def learned(self) -> list[dict[str, Any]]:
        """In the parent, once the workers have ended: what each one that ended its run
        learned (:meth:`finish`'s keywords)."""
        return [last["end"] for last in self._last.values() if "end" in last]

    def unanswered(self, answered: set[int]) -> list[tuple[int, str]]:
        """In the parent, once the workers have ended: each shared position some process
        took (a worker may die between taking one and saying so) that is not in
        ``answered``, with what became of the worker that had it."""
        ended = self.ended()
        lost = []
        for position in self.shared[: self._next.value]:
            if position in answered:
                continue
            # The worker that said it took the clause; else one that ended without its last word.
            pid, how = next(((p, h) for p, h in ended if position in self._took.get(p, [])),
                            next(((p, h) for p, h in ended if h or "end" not in self._last.get(p, {})), ended[0]))
            raised = self._last.get(pid, {}).get("raised")
            lost.append((position, f"the worker process running this clause (pid {pid}) {how or 'ended'} before "
                                   f"its verdict" + (f"; it raised {raised}" if raised else "")))
        return lost

    # -- in a worker -------------------------------------------------------------

    def send(self, *message: Any) -> None:
        """One message to the parent (from any thread of the worker)."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._sending:
            _write_all(self._out, _HEADER.pack(len(data)) + data)

    def finish(self, **learned: Any) -> NoReturn:
        """Send what this worker learned of the store and exit, running no exit handler
        of the parent's."""
        code = 0
        try:
            self.send("end", learned)
        except BaseException:  # the parent is gone: nobody to tell
            code = 1
        finally:
            _exit(code)

    def died(self, error: BaseException) -> NoReturn:
        """A worker's run raised: tell the parent, which reports its clause, and exit."""
        with contextlib.suppress(BaseException):
            self.send("raised", f"{type(error).__name__}: {error}")
        _exit(1)

    # -- in the parent -----------------------------------------------------------

    def abandon(self) -> None:
        """In the parent, whose run raised: kill the workers and reap them."""
        if self._ended is not None:
            return
        self._ended = []
        for pid, _ in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def relay(self, on_message: Callable[[tuple[Any, ...]], None]) -> None:
        """Read every worker's messages on threads of this process until :meth:`ended`,
        calling ``on_message(message)`` for each verdict and progress."""

        def heard(pid: int, message: tuple[Any, ...]) -> None:
            kind, *rest = message
            if kind == "took":
                self._took.setdefault(pid, []).append(rest[0])
            elif kind in ("end", "raised"):
                self._last.setdefault(pid, {})[kind] = rest[0]
            else:
                on_message(message)

        threads = []
        for pid, fd in self.workers:
            thread = threading.Thread(target=_read_messages, args=(pid, fd, heard, self.errors), daemon=True,
                                      name=f"storetest-worker-{pid}")
            thread.start()
            threads.append(thread)

        def join() -> list[tuple[int, str]]:
            ended = []
            for thread, (pid, _) in zip(threads, self.workers, strict=True):
                while thread.is_alive():
                    thread.join(0.2)
                _, status = os.waitpid(pid, 0)
                ended.append((pid, _how_it_ended(status)))
            return ended

        self._join = join


def _become_worker(parent: int) -> None:
    # The terminal's Ctrl-C goes to the foreground process group: the parent passes it
    # on, once, which the run's watch hears; outside it (before, and once the run's
    # teardown is done) a Ctrl-C must not cut the worker's last message short.
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _exit(code: int) -> NoReturn:
    # What a store or factory printed in the worker, out before its exit.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _read_messages(pid: int, fd: int, on_message: Callable[[int, tuple[Any, ...]], None],
                   errors: list[BaseException]) -> None:
    # Read to the end whatever on_message raises: a worker blocked writing to a full
    # pipe would never end, and the parent waits for it.
    with os.fdopen(fd, "rb") as pipe:
        while True:
            header = pipe.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return
            (size,) = _HEADER.unpack(header)
            data = pipe.read(size)
            if len(data) < size:
                return
            try:
                on_message(pid, pickle.loads(data))
            except BaseException as exc:
                errors.append(exc)


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(number).name}"
        return f"killed by signal {number}"
    code = os.WEXITSTATUS(status)
    return "" if code == 0 else f"exited with status {code}"
