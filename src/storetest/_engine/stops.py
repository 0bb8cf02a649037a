"""How a run stops: a deadline on every call into the store and its factories, and Ctrl-C.

A store call past the deadline ends its clause with a violation naming the call, the
session and the seconds waited. An async call is cancelled. A plain call cannot be
stopped: a plain store's clause runs on a thread of its own (:meth:`Watch.supervise`),
which makes its calls outside races itself, with no hand-off to another thread, while
the caller's thread watches the deadline. Past it the clause's thread is left behind,
still in the call (a daemon, so the process can still exit), and the clause's teardown
skipped, since the store may still be in use; should the call ever return, the thread
raises :class:`Left` and unwinds without another call. A racing call (and any plain
call of a clause with an async handle) runs on a pool thread, abandoned the same way.

A clause's event loop runs on a thread of its own (:class:`LoopThread`), with its
factory, its teardown, and the clause itself when a handle is async; the caller's thread
watches it. An async call is cancelled past the deadline by the loop; but an ``async
def`` that makes a synchronous call (``time.sleep``, a blocking driver) stops the loop,
and every deadline kept on it: the watching thread sees the loop stop turning, and past
the deadline reports the store method that blocked it and leaves the loop's thread
behind, as a stuck plain call's. A plain factory's code, on that thread, is left behind
past the deadline the same way (after Ctrl-C, at once). Outside a clause's target, on
the main thread, a plain factory past the deadline is stopped by an exception raised
inside it (a timer signal).

Ctrl-C under :func:`storetest.check` sets a flag instead of raising KeyboardInterrupt
wherever the main thread happens to be (raised inside the event loop, it left the loop
half stopped, and the clause in flight was reported as an error of the store: "Event
loop stopped before Future completed"). The call in flight is cancelled at a safe
point (a loop blocked by the store's code is left behind within a second), the clause
is reported *interrupted*, its teardown runs, and ``check`` raises
:class:`storetest.results.Interrupted` with the report so far. A second Ctrl-C exits at
once (status 130), without teardown.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import os
import queue
import random
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager, nullcontext, suppress
from typing import Any, Final, TypeVar

from storetest._engine import profiles, servers

T = TypeVar("T")

#: Seconds a store or factory call may take (every profile's default): above any bound a
#: reference store sets on its own calls (``PostgresStore(timeout=30)``, MySQL's 30 s
#: read and write timeouts), so a slow real database is never cut short.
DEFAULT_CALL_TIMEOUT: Final = profiles.DEFAULT_CALL_TIMEOUT

#: The exit status of an interrupted run (128 + SIGINT), as a shell reports it.
INTERRUPTED_STATUS: Final = 130

#: How the deadline is set, for messages.
HOW_TO_SET: Final = "check(call_timeout=), --call-timeout, --storetest-call-timeout"


class StuckCall(BaseException):
    """A call into the store or a factory did not return within the deadline.

    A BaseException, as KeyboardInterrupt is: a clause's ``except Exception`` must not
    take it for the store's error and go on calling, and Hypothesis must not shrink on it.
    """

    def __init__(self, what: str, session: str, seconds: float, fate: str, method: str = "") -> None:
        self.what = what
        self.session = session
        self.seconds = seconds
        #: ``cancelled`` (an async call), ``abandoned`` (a plain call's thread),
        #: ``stopped`` (an exception raised inside a plain factory) or ``blocked`` (an
        #: async call that blocked the event loop: its thread was abandoned).
        self.fate = fate
        #: For ``blocked``: the method (``save``) whose synchronous code held the loop.
        self.method = method
        super().__init__(self.text())

    def text(self, stage: str = "") -> str:
        """What happened; ``stage`` (``while making the store``) goes after the seconds."""
        if self.fate == "blocked":
            return (f"`{self.method}` blocked the event loop for {self.seconds:g} s{stage}: a synchronous call "
                    f"inside `async def` ({self.what}; the call deadline: {HOW_TO_SET}); the loop's thread "
                    "cannot be stopped, so it was abandoned, still running, and the clause's teardown was "
                    "skipped (the store may still be in use)")
        fates = {
            "cancelled": "it was cancelled",
            "abandoned": "its thread cannot be stopped, so it was abandoned, still running, and the "
                         "clause's teardown was skipped (the store may still be in use)",
            "stopped": "it was stopped by an exception raised inside it",
        }
        return (f"{self.what} did not return within {self.seconds:g} s{stage} (the call deadline: {HOW_TO_SET}); "
                f"{fates[self.fate]}")


#: Whether the call :meth:`Watch.call` is awaiting runs on a thread (see :func:`in_thread`).
_THREADED: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar("storetest_threaded", default=None)


async def in_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)`` on a thread, as :func:`asyncio.to_thread` (the loop's pool of daemon
    threads): how a binding drives a plain session or history from its async methods.
    Past the deadline that thread cannot be stopped: the call is reported abandoned (its
    clause's teardown skipped), not cancelled."""
    threaded = _THREADED.get()
    if threaded is not None:
        threaded[0] = True
    return await asyncio.to_thread(fn, *args)


class Interrupt(BaseException):
    """Ctrl-C reached the clause in flight (raised at a safe point, never by the store)."""


class Left(BaseException):
    """Raised on the thread of a clause the run has left behind, once its stuck call
    returns: the clause unwinds without calling the store again."""


#: Seconds between the supervisor's looks at the clause's call in flight and at Ctrl-C.
_POLL: Final = 0.1

#: Seconds an event loop may go without turning once Ctrl-C came (cancelling its call
#: needs a turn) before the code it runs is taken to block it, and its thread left.
_BLOCKED_AFTER_CTRL_C: Final = 1.0


class Clause:
    """One clause running on its own thread under :meth:`Watch.supervise`: the plain
    call it is in, and whether the run has left it behind."""

    __slots__ = ("ident", "in_call", "left", "making", "watch")

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.ident: int | None = None
        self.left = False
        #: The call in flight on the clause's thread: what, session, when it began, flight key.
        self.in_call: tuple[str, str, float, int] | None = None
        #: Whether that call is a factory making a store (Ctrl-C leaves it at once).
        self.making = False

    def call(self, what: str, session: str, fn: Callable[[], T], *, store: bool = True,
             interruptible: bool = True) -> T:
        """``fn()`` right here on the clause's thread, :meth:`Watch.supervise` keeping
        its deadline: a call into the store (``store``), or a factory's plain code, which
        sees the clause's event loop running, as the factory of the clause's own store
        did; a teardown (not ``interruptible``) runs after Ctrl-C too."""
        if self.left:
            raise Left
        watch = self.watch
        if interruptible and watch.interrupted:
            raise Interrupt
        key = next(watch._ids)
        began = time.monotonic()
        watch._flying[key] = (what, began)
        self.making = not store and interruptible
        self.in_call = (what, session, began, key)
        # The store sees no event loop running, as on a thread of its own: a plain store
        # over an async driver may call asyncio.run() inside.
        loop = asyncio._get_running_loop()
        if store:
            asyncio._set_running_loop(None)
        try:
            # As asyncio.to_thread does: the store reads the caller's context, and what
            # it sets there stays with the call.
            return contextvars.copy_context().run(fn)
        finally:
            asyncio._set_running_loop(loop)
            self.in_call = None
            watch._flying.pop(key, None)
            if self.left:
                raise Left  # the run gave up on this call: its result goes nowhere

    def leave(self, why: str) -> None:
        """Give the clause up (its teardown is skipped: ``why`` goes on the watch's
        ``abandoned``)."""
        self.watch.abandoned.append(why)
        self.left = True
        call = self.in_call
        if call is not None:
            self.watch._flying.pop(call[3], None)


_CLAUSE: contextvars.ContextVar[Clause | None] = contextvars.ContextVar("storetest_clause", default=None)


def clause_here() -> Clause | None:
    """The supervised clause whose own thread this is (not a race's threads)."""
    clause = _CLAUSE.get()
    return clause if clause is not None and clause.ident == threading.get_ident() else None


def finish_now(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work`` to its end right here: a coroutine that waits for nothing (a plain
    store's call on its clause's own thread)."""
    try:
        work.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    work.close()
    raise RuntimeError("storetest: a coroutine run without the event loop waited for something")


def left_behind() -> bool:
    """Whether this is the thread (or a task) of a clause the run has left behind."""
    clause = _CLAUSE.get()
    return clause is not None and clause.left


#: The one Random every clause thread hands Hypothesis (see :func:`_share_hypothesis_random`).
_HYPOTHESIS_RANDOM: random.Random | None = None
_HYPOTHESIS_RANDOM_LOCK = threading.Lock()


def _share_hypothesis_random() -> None:
    """Give this new thread (a clause's, an event loop's) the run's one registered
    Random as Hypothesis's per-thread global Random.

    The first time a thread runs a Hypothesis test, Hypothesis makes that thread a
    Random of its own and registers it (``register_random``), which runs a full
    ``gc.collect()`` and scans the heap with ``gc.get_referrers``: about 15 ms each time,
    and every clause runs on a new thread. Registered once and shared, it is paid once a
    run. Clauses run one at a time, and Hypothesis seeds and restores the registered
    Randoms around each test as it does the ``random`` module's, which every thread
    already shares. A Hypothesis without that per-thread attribute is left alone."""
    global _HYPOTHESIS_RANDOM
    core = sys.modules.get("hypothesis.core")
    local = getattr(core, "threadlocal", None)
    if local is None:
        return
    try:
        if local._hypothesis_global_random is not None:
            return
        with _HYPOTHESIS_RANDOM_LOCK:
            if _HYPOTHESIS_RANDOM is None:
                from hypothesis import register_random

                # Held by the module first: Hypothesis keeps only a weak reference, and
                # warns when nothing else refers to what it registers.
                _HYPOTHESIS_RANDOM = random.Random()
                register_random(_HYPOTHESIS_RANDOM)
        local._hypothesis_global_random = _HYPOTHESIS_RANDOM
    except (AttributeError, ImportError):
        return  # another Hypothesis: it registers a Random of its own per thread, as before


class Watch:
    """One run's deadline, its calls in flight, and its Ctrl-C."""

    def __init__(self, timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self.timeout = timeout
        self.interrupted = False
        #: The calls in flight when Ctrl-C came.
        self.at_interrupt: list[tuple[str, float]] = []
        #: The event loop of the clause in flight, and the task its main thread waits for.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.current: asyncio.Future[Any] | None = None
        #: Calls of this clause whose thread was left running (its teardown is skipped).
        self.abandoned: list[str] = []
        #: What an abandoned clause left behind, kept alive (nothing may finalize it).
        self.kept: list[Any] = []
        self._flying: dict[int, tuple[str, float]] = {}
        self._ids = itertools.count()
        self._plain_making = 0  # > 0 while a plain factory makes a store on the main thread
        self._alarm = False
        #: The run's worker processes (:mod:`storetest._engine.workers`): Ctrl-C here is
        #: passed on to them, as the terminal's reaches this process alone.
        self.workers: list[int] = []
        #: In a worker: its parent says what Ctrl-C does, once.
        self.quiet = False

    def flying(self) -> list[tuple[str, float]]:
        """The calls in flight, oldest first, with the seconds each has taken so far."""
        now = time.monotonic()
        return [(what, now - began) for what, began in sorted(self._flying.copy().values(), key=lambda x: x[1])]

    @contextmanager
    def flight(self, what: str) -> Iterator[None]:
        key = next(self._ids)
        self._flying[key] = (what, time.monotonic())
        try:
            yield
        finally:
            self._flying.pop(key, None)

    # -- calls ------------------------------------------------------------------------

    async def call(self, what: str, session: str, work: Callable[[], Awaitable[T]], *, thread: bool) -> T:
        """``await work()`` within the deadline; a plain call's thread is abandoned past it."""
        if left_behind():
            raise Left
        if self.interrupted:
            raise Interrupt
        abandoned = self.abandoned  # this clause's, should a later one have begun by the deadline
        threaded = [thread]  # set by in_thread(): a binding handed the call to a thread
        token = _THREADED.set(threaded)
        with self.flight(what):
            timeout = asyncio.timeout(self.timeout)
            try:
                async with timeout:
                    return await work()
            except TimeoutError:
                if not timeout.expired():
                    raise  # the store's own TimeoutError
                if threaded[0]:
                    abandoned.append(what)
                raise StuckCall(what, session, self.timeout, "abandoned" if threaded[0] else "cancelled") from None
            finally:
                _THREADED.reset(token)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a clause's idle time), ending at once on Ctrl-C (:class:`Interrupt`)."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.interrupted:
                raise Interrupt
            time.sleep(min(_POLL, left))

    def plain(self, what: str, fn: Callable[[], T], *, making: bool = True) -> T:
        """``fn()`` (a factory's plain code) on this thread within the deadline: past it,
        a timer signal raises :class:`StuckCall` inside ``fn`` (in the main thread, when
        no other timer is set; otherwise it runs unbounded)."""
        clause = clause_here()
        if clause is not None:
            # A factory inside a clause (a fresh backend, a reopen): supervise() keeps its deadline.
            return clause.call(what, "", fn, store=False, interruptible=making)
        if (self._alarm or threading.current_thread() is not threading.main_thread()
                or not hasattr(signal, "setitimer") or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
            # Off the main thread, or another timer is set (pytest-timeout's): never replaced.
            with self.flight(what):
                return fn()
        armed = True

        def on_alarm(signum: int, frame: object) -> None:
            if armed:
                raise StuckCall(what, "", self.timeout, "stopped")

        previous = signal.signal(signal.SIGALRM, on_alarm)
        self._alarm = True
        self._plain_making += making
        try:
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
            with self.flight(what):
                return fn()
        finally:
            armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            self._alarm = False
            self._plain_making -= making

    async def step(self, what: str, work: Awaitable[T]) -> T:
        """An async factory step (making or tearing down) within the deadline."""
        if left_behind():
            raise Left
        with self.flight(what):
            timeout = asyncio.timeout(self.timeout)
            try:
                async with timeout:
                    return await work
            except TimeoutError:
                if not timeout.expired():
                    raise
                raise StuckCall(what, "", self.timeout, "cancelled") from None

    def run(self, loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T], *, interruptible: bool = True) -> T:
        """``loop.run_until_complete(work)``, on the loop's own thread when it has one
        (:class:`LoopThread`: this thread then watches it); Ctrl-C cancels it (when
        ``interruptible``) and raises :class:`Interrupt` here."""
        if left_behind():
            work.close()
            raise Left
        if interruptible and self.interrupted:
            work.close()
            raise Interrupt
        home = loop_thread_of(loop)
        if home is not None and not home.here():
            return home.call(lambda: self.run(loop, work, interruptible=interruptible))
        task = loop.create_task(work)
        outer = self.current
        mine = self.current = task if interruptible else None
        try:
            with home.turning() if home is not None else nullcontext():
                return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if self.interrupted:
                raise Interrupt from None
            raise
        finally:
            if self.current is mine:  # not a clause left behind, unwinding while a later one runs
                self.current = outer

    def supervise(self, work: Callable[[], T]) -> T:
        """``work()`` (one clause) on a thread of its own, this thread watching it.

        The clause's plain calls run on its thread (:meth:`Clause.call`): a hand-off to
        another thread and back cost more than the call itself against an embedded store
        (benchmarks/plain_calls.py). Past the deadline of a call in flight, the clause's
        thread is left behind and :class:`StuckCall` raised here; after Ctrl-C, the
        clause ends at its next call or await, or is left behind past the deadline of
        the call it is in (then :class:`Interrupt` here). What ``work`` raises is raised
        here."""
        clause = Clause(self)
        outcome: list[tuple[bool, Any]] = []

        # Not Thread.join: an exception raised in it by a signal handler leaves the
        # thread marked as ended while it still runs (CPython 3.11).
        ended = threading.Event()

        def run() -> None:
            clause.ident = threading.get_ident()
            _CLAUSE.set(clause)
            _share_hypothesis_random()
            try:
                outcome.append((True, work()))
            except BaseException as exc:  # raised again on the supervising thread
                outcome.append((False, exc))
            finally:
                ended.set()

        thread = threading.Thread(target=contextvars.copy_context().run, args=(run,), name="storetest-clause",
                                  daemon=True)
        thread.start()
        try:
            self._watch(ended, clause)
        except BaseException:
            if not ended.is_set() and not clause.left:
                # Raised here while watching (a test runner's own timeout): the clause
                # may still be in the store, so it is left, and its teardown skipped.
                clause.leave("the clause, still running when its run was stopped")
            raise
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def _watch(self, ended: threading.Event, clause: Clause, home: LoopThread | None = None) -> None:
        """Wait for the clause's thread to end; past a call's deadline, or the deadline
        after Ctrl-C, leave it and raise :class:`StuckCall` or :class:`Interrupt`. On an
        event loop's own thread (``home``), a loop that has not turned for the deadline
        (or, after Ctrl-C, for :data:`_BLOCKED_AFTER_CTRL_C`) is blocked by the code it
        runs: left too."""
        interrupted_at: float | None = None
        while not ended.wait(_POLL):
            now = time.monotonic()
            if self.interrupted and interrupted_at is None:
                interrupted_at = now
            call = clause.in_call
            still = home.still() if home is not None and call is None else 0.0
            if call is not None and (now - call[2] >= self.timeout or (
                    clause.making and interrupted_at is not None
                    and now - interrupted_at >= min(_BLOCKED_AFTER_CTRL_C, self.timeout))):
                # A factory's plain code cannot be cancelled: after Ctrl-C it is left at once.
                stuck = StuckCall(call[0], call[1], self.timeout, "abandoned")
            elif home is not None and (still >= self.timeout or (
                    interrupted_at is not None and still >= min(_BLOCKED_AFTER_CTRL_C, self.timeout))):
                stuck = home.blocked(self.timeout)
            elif interrupted_at is not None and now - interrupted_at >= self.timeout:
                stuck = StuckCall("the clause, still running after Ctrl-C", "", self.timeout, "abandoned")
            else:
                continue
            clause.leave(stuck.what)
            if self.interrupted:
                raise Interrupt
            raise stuck

    # -- Ctrl-C -----------------------------------------------------------------------

    @contextmanager
    def catching_interrupts(self) -> Iterator[None]:
        """Ctrl-C sets :attr:`interrupted` while the block runs (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._on_interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _on_interrupt(self, signum: int, frame: object) -> None:
        for pid in self.workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
        if self.interrupted:
            exit_now("interrupted again: exiting now, without teardown", quiet=self.quiet)
        self.interrupted = True
        self.at_interrupt = self.flying()
        if not self.quiet:
            os.write(2, b"\nstoretest: interrupted: stopping the clause in flight and running its teardown "
                        b"(Ctrl-C again to exit at once)\n")
        loop = self.loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._cancel)
            except RuntimeError:
                pass  # the loop is closed: no call is in flight on it
        if self._plain_making:
            raise Interrupt  # a factory's plain code, blocked on the main thread, is unwound

    def _cancel(self) -> None:
        if self.current is not None and not self.current.done():
            self.current.cancel()


class LoopThread:
    """The thread an event loop runs on, and whatever runs it: a clause's factory, its
    clause when a handle is async, its teardown (one thread, as a store may be bound
    to the thread that made it: a sqlite3 connection). The thread that hands it work
    (:meth:`call`) watches it, as :meth:`Watch.supervise` watches a clause's thread: an
    ``async def`` that makes a synchronous call (``time.sleep``, a blocking driver)
    stops the loop, and with it every deadline kept on the loop; seen from here, the
    loop has stopped turning, and the thread is left behind as a stuck plain call's is."""

    def __init__(self, watch: Watch, loop: asyncio.AbstractEventLoop) -> None:
        self.watch = watch
        self.loop = loop
        self.clause = Clause(watch)
        #: Whether the loop is running, and when it last turned (while it runs).
        self.running = False
        self.turned = 0.0
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="storetest-loop", daemon=True)
        self.thread.start()
        self.clause.ident = self.thread.ident
        loop._storetest_thread = self  # type: ignore[attr-defined]

    def here(self) -> bool:
        return threading.get_ident() == self.thread.ident

    def _serve(self) -> None:
        _share_hypothesis_random()
        while (job := self._jobs.get()) is not None:
            job()

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop's thread, this thread watching it (see :meth:`Watch._watch`)."""
        if self.here():
            return fn()
        if self.clause.left:
            raise Left
        outcome: list[tuple[bool, Any]] = []
        ended = threading.Event()
        context = contextvars.copy_context()

        def job() -> None:
            try:
                outcome.append((True, context.run(self._as_clause, fn)))
            except BaseException as exc:  # raised again on the watching thread
                outcome.append((False, exc))
            finally:
                ended.set()

        self._jobs.put(job)
        try:
            self.watch._watch(ended, self.clause, self)
        except BaseException:
            if not ended.is_set() and not self.clause.left:
                self.clause.leave("the clause, still running when its run was stopped")
            raise
        ok, value = outcome[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def _as_clause(self, fn: Callable[[], T]) -> T:
        _CLAUSE.set(self.clause)
        return fn()

    @contextmanager
    def turning(self) -> Iterator[None]:
        """While the loop runs (on its thread), note every turn it takes (:data:`_POLL`)."""
        loop = self.loop
        handle: list[asyncio.TimerHandle] = []

        def tick() -> None:
            self.turned = time.monotonic()
            handle[:] = [loop.call_later(_POLL, tick)]

        self.turned = time.monotonic()
        handle.append(loop.call_later(_POLL, tick))
        self.running = True
        try:
            yield
        finally:
            self.running = False
            handle[0].cancel()

    def still(self) -> float:
        """Seconds the running loop has not turned (0 when it is not running)."""
        return time.monotonic() - self.turned if self.running else 0.0

    def blocked(self, seconds: float) -> StuckCall:
        """What blocks the loop, read from its thread's stack: the store method (or the
        factory) an awaited call of the harness is in."""
        frame = sys._current_frames().get(self.thread.ident or 0)
        innermost = frame
        while frame is not None:
            back = frame.f_back
            if back is not None and back.f_code in _AWAITING:
                what = back.f_locals.get("what", "the event loop's code")
                return StuckCall(what, back.f_locals.get("session", ""), seconds, "blocked", frame.f_code.co_name)
            frame = back
        name = innermost.f_code.co_name if innermost is not None else "the loop's code"
        return StuckCall("the event loop's code", "", seconds, "blocked", name)

    def stop(self) -> None:
        """End the thread once its job (if any) is done."""
        self._jobs.put(None)


#: The harness's frames that await the store's (or a factory's) code.
_AWAITING: Final = frozenset({Watch.call.__code__, Watch.step.__code__})


def loop_thread_of(loop: asyncio.AbstractEventLoop) -> LoopThread | None:
    """The :class:`LoopThread` ``loop`` runs on, if it has one."""
    return getattr(loop, "_storetest_thread", None)


#: Where :func:`exit_now` writes: the process's stderr, or what was its stderr before a
#: test runner captured it (the pytest plugin sets this: a capture file is lost on exit).
messages_fd = 2


def exit_now(why: str, quiet: bool = False) -> None:
    """Exit at once (status 130), without teardown, but stop the throwaway servers this
    process started (their own process groups: the terminal's Ctrl-C never reached them),
    saying which, with their pids (``quiet``: a worker, whose parent says why)."""
    lines = [why, *servers.stop_started_now()]
    if not quiet or lines[1:]:
        os.write(messages_fd, ("\n" + "".join(f"storetest: {line}\n" for line in lines)).encode())
    os._exit(INTERRUPTED_STATUS)


_CURRENT: contextvars.ContextVar[Watch | None] = contextvars.ContextVar("storetest_watch", default=None)
_DEFAULT = Watch()


def current() -> Watch:
    """The watch of the run in progress (a default one outside :func:`watching`)."""
    return _CURRENT.get() or _DEFAULT


@contextmanager
def watching(watch: Watch, interrupts: bool = True) -> Iterator[Watch]:
    """``watch`` is the run's while the block runs; with ``interrupts``, Ctrl-C too.
    A child process passes ``interrupts=False``: its parent hears Ctrl-C and stops it."""
    token = _CURRENT.set(watch)
    try:
        with watch.catching_interrupts() if interrupts else nullcontext():
            yield watch
    finally:
        _CURRENT.reset(token)


class DaemonPool(concurrent.futures.ThreadPoolExecutor):
    """The threads plain calls run on: daemon threads, started as needed, so a thread
    stuck in the store neither blocks the loop's shutdown nor the interpreter's exit
    (``ThreadPoolExecutor``'s own threads are joined at exit, however long they take).
    A ``ThreadPoolExecutor`` in name only, as asyncio's default executor must be: its
    every method is replaced."""

    def __init__(self, name: str) -> None:
        super().__init__(1, thread_name_prefix=name)  # starts no thread; submit is ours
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._busy = 0
        self._done = threading.Condition(self._lock)
        self._workers: list[threading.Thread] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put((future, fn, args, kwargs))
        with self._lock:
            if self._idle:
                self._idle -= 1
                return future
            thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._workers)}", daemon=True)
            self._workers.append(thread)
        thread.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            with self._lock:
                self._busy += 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    future.set_exception(exc)
            with self._lock:
                self._busy -= 1
                self._idle += 1
                self._done.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no thread is in a call; ``False`` if one still is after ``timeout``."""
        with self._lock:
            return self._done.wait_for(lambda: self._busy == 0, timeout)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            threads, idle = list(self._workers), self._idle
        for _ in threads:
            self._queue.put(None)
        if wait and idle == len(threads):
            for thread in threads:
                thread.join()
