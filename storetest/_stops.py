"""How a run stops: a deadline on every call into the store and its factories, and Ctrl-C.

A store call past the deadline ends its clause with a violation naming the call, the
session and the seconds waited. An async call is cancelled. A plain call runs on a
thread that nothing can kill: the thread is abandoned (a daemon, so the process can
still exit) and the clause's teardown skipped, since the store may still be in use.
A plain factory runs on the caller's thread; past the deadline an exception is raised
inside it (a timer signal, in the main thread).

Ctrl-C under :func:`storetest.check` sets a flag instead of raising KeyboardInterrupt
wherever the main thread happens to be (raised inside the event loop, it left the loop
half stopped, and the clause in flight was reported as an error of the store: "Event
loop stopped before Future completed"). The call in flight is cancelled at a safe
point, the clause is reported *interrupted*, its teardown runs, and ``check`` raises
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
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from storetest import profiles

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

    def __init__(self, what: str, session: str, seconds: float, fate: str) -> None:
        self.what = what
        self.session = session
        self.seconds = seconds
        #: ``cancelled`` (an async call), ``abandoned`` (a plain call's thread) or
        #: ``stopped`` (an exception raised inside a plain factory).
        self.fate = fate
        super().__init__(self.text())

    def text(self, stage: str = "") -> str:
        """What happened; ``stage`` (``while making the store``) goes after the seconds."""
        fates = {
            "cancelled": "it was cancelled",
            "abandoned": "its thread cannot be stopped, so it was abandoned, still running, and the "
                         "clause's teardown was skipped (the store may still be in use)",
            "stopped": "it was stopped by an exception raised inside it",
        }
        return (f"{self.what} did not return within {self.seconds:g} s{stage} (the call deadline: {HOW_TO_SET}); "
                f"{fates[self.fate]}")


class Interrupt(BaseException):
    """Ctrl-C reached the clause in flight (raised at a safe point, never by the store)."""


#: Seconds between looks at Ctrl-C while the main thread waits for a plain call.
_POLL: Final = 0.1


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
        if self.interrupted:
            raise Interrupt
        with self.flight(what):
            timeout = asyncio.timeout(self.timeout)
            try:
                async with timeout:
                    return await work()
            except TimeoutError:
                if not timeout.expired():
                    raise  # the store's own TimeoutError
                if thread:
                    self.abandoned.append(what)
                raise StuckCall(what, session, self.timeout, "abandoned" if thread else "cancelled") from None

    def waits_here(self) -> bool:
        """Whether :meth:`waited` can run a plain call from the running loop (its thread
        pool is ours)."""
        return isinstance(getattr(asyncio.get_running_loop(), "_default_executor", None), DaemonPool)

    def waited(self, what: str, session: str, fn: Callable[[], T]) -> T:
        """``fn()`` (a plain store call) on one of the loop's threads, this thread
        waiting for it within the deadline; past it, the thread is abandoned as with
        :meth:`call`. Only for a call that nothing else on the loop runs beside: the
        loop is blocked meanwhile, which spares the call its round trip through the
        loop (nearly half of what the harness adds to a plain call, measured by
        benchmarks/plain_calls.py).
        Ctrl-C is seen within :data:`_POLL` seconds and raises :class:`Interrupt`, as
        the cancelled call of :meth:`call` does."""
        if self.interrupted:
            raise Interrupt
        pool: DaemonPool = asyncio.get_running_loop()._default_executor  # type: ignore[attr-defined]
        context = contextvars.copy_context()  # as asyncio.to_thread does: the store may read it
        with self.flight(what):
            future: concurrent.futures.Future[T] = pool.submit(context.run, fn)
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    return future.result(timeout=max(0.0, min(_POLL, deadline - time.monotonic())))
                except TimeoutError:
                    if future.done():
                        raise  # the store's own TimeoutError
                if self.interrupted:
                    raise Interrupt
                if time.monotonic() >= deadline:
                    self.abandoned.append(what)
                    raise StuckCall(what, session, self.timeout, "abandoned") from None

    def plain(self, what: str, fn: Callable[[], T], *, making: bool = True) -> T:
        """``fn()`` (a factory's plain code) on this thread within the deadline: past it,
        a timer signal raises :class:`StuckCall` inside ``fn`` (in the main thread, when
        no other timer is set; otherwise it runs unbounded)."""
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
        """``loop.run_until_complete(work)``; Ctrl-C cancels it (when ``interruptible``)
        and raises :class:`Interrupt` here."""
        if interruptible and self.interrupted:
            work.close()
            raise Interrupt
        task = loop.create_task(work)
        outer = self.current
        self.current = task if interruptible else None
        try:
            return loop.run_until_complete(task)
        except asyncio.CancelledError:
            if self.interrupted:
                raise Interrupt from None
            raise
        finally:
            self.current = outer

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
        if self.interrupted:
            os.write(2, b"\nstoretest: interrupted again: exiting now, without teardown\n")
            os._exit(INTERRUPTED_STATUS)
        self.interrupted = True
        self.at_interrupt = self.flying()
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


_CURRENT: contextvars.ContextVar[Watch | None] = contextvars.ContextVar("storetest_watch", default=None)
_DEFAULT = Watch()


def current() -> Watch:
    """The watch of the run in progress (a default one outside :func:`watching`)."""
    return _CURRENT.get() or _DEFAULT


@contextmanager
def watching(watch: Watch) -> Iterator[Watch]:
    token = _CURRENT.set(watch)
    try:
        with watch.catching_interrupts():
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
