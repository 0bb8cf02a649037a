"""What a clause runs against: the store under test (and its replica) behind one async
interface, the event loop they live on, the profile and seed, and session ids that a
replay reproduces.

Async stores are driven by tasks on one event loop (an asyncpg pool must stay on the
loop that made it); plain stores by threads. That difference lives here and in
:mod:`storetest._engine.races`, nowhere else.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import itertools
import os
import random
import sys
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from storetest._engine import races, stops
from storetest._engine.profiles import Profile
from storetest.contract import Message

T = TypeVar("T")

#: What a store's methods say it claims. A capability is claimed when every one of its
#: methods is there; a store may keep only transcripts, or only steers.
CAPABILITIES: Final[dict[str, tuple[str, ...]]] = {
    "transcript": ("save", "messages"),
    "steers": ("add_steer", "take_steers"),
    "log": ("append", "entries", "create"),
    # An item history (an agent SDK's session), through storetest.bindings.openai_agents.
    "items": ("get_items", "add_items", "pop_item", "clear_session"),
    # A Google ADK session service, through storetest.bindings.adk.
    "adk": ("create_session", "get_session", "list_sessions", "append_event", "delete_session"),
    # A LangGraph checkpointer, through storetest.bindings.langgraph.
    "checkpoints": ("put_checkpoint", "put_writes", "get_checkpoint", "list_checkpoints", "delete_thread"),
    # Its optional methods, each claimed by a saver that overrides it.
    "copy_thread": ("copy_thread",),
    "prune": ("prune",),
    "delete_for_runs": ("delete_for_runs",),
    # A transcript store that deletes whole sessions (Microsoft Agent Framework's
    # SessionStore, through storetest.bindings.agent_framework_sessions).
    "deletes": ("delete",),
    # A LlamaIndex chat store, through storetest.bindings.llama_index: what it has beyond items,
    # and an AsyncDBChatStore's queue (SQLAlchemyChatStore).
    "llama_index": ("set_messages", "delete_message", "get_keys"),
    "llama_index_db": ("count_messages", "delete_oldest_messages", "archive_oldest_messages"),
}


class StoreExit(Exception):
    """A store method raised KeyboardInterrupt or SystemExit (the cause), as an error of the store."""


class StoreShapeError(TypeError):
    """The factory gave something that is not a store (a misconfigured run)."""


class SetupFailure(BaseException):
    """A store call found the run set up wrong (:class:`StoreShapeError` from a binding:
    an opener that returned ``None``): the run's error, said once, not a failure of each
    clause. A BaseException, so no clause takes it for the store's refusal of bad input
    and Hypothesis does not shrink on it."""

    def __init__(self, error: StoreShapeError) -> None:
        self.error = error
        super().__init__(str(error))


class FactoryError(Exception):
    """A factory (``label`` is ``factory`` or ``replica``) raised while making a store
    or tearing it down; the original error is the ``__cause__``."""

    def __init__(self, label: str, stage: str, error: BaseException) -> None:
        self.label = label
        self.stage = stage
        self.error = error
        super().__init__(f"the {label} raised {type(error).__name__} while {stage}: {error}")


def code_roots(thing: object) -> list[str]:
    """Directories (or, for a top-level module, the file) holding ``thing``'s code: the
    store's own code, as opposed to its driver's, asyncio's or storetest's. A binding's
    handle names the objects it drives (the SDK's sessions, its outer factory) through
    ``storetest_code()``: their code is the store's, the binding's is not."""
    hook = getattr(thing, "storetest_code", None)
    if callable(hook):
        roots = [r for inner in hook() for r in code_roots(inner)]
        return list(dict.fromkeys(roots))
    name = getattr(thing, "__module__", None) or type(thing).__module__
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if not path:
        return []
    top = sys.modules.get(name.split(".")[0])
    top_path = getattr(top, "__file__", None) or path
    if Path(top_path).name != "__init__.py":
        return [path]
    if Path(top_path).parent.name == "storetest":  # a store inside storetest itself: its file only
        return [path]
    return [str(Path(top_path).parent) + os.sep]


def capabilities_of(store: object) -> tuple[frozenset[str], dict[str, list[str]]]:
    """The capabilities ``store`` claims, and for each capability it has only some of
    the methods of, the methods it has (a store that forgot ``take_steers``)."""
    present = {m for ms in CAPABILITIES.values() for m in ms if callable(getattr(store, m, None))}
    claimed = frozenset(c for c, ms in CAPABILITIES.items() if all(m in present for m in ms))
    partial = {
        c: sorted(set(ms) & present)
        for c, ms in CAPABILITIES.items()
        if c not in claimed and set(ms) & present
    }
    return claimed, partial


def declared_capabilities(factory: Callable[..., Any]) -> frozenset[str] | None:
    """What the stores ``factory`` makes claim, known without calling it: from a class
    (``run_conformance(MyStore)``) or the factory's return annotation (``-> MyStore``,
    ``-> Iterator[MyStore]``, ``-> AsyncIterator[MyStore]``, ``-> Awaitable[MyStore]``).
    ``None`` when neither says (a lambda, no annotation, ``Any``)."""
    bound = getattr(factory, "storetest_capabilities", None)  # a binding says (item_sessions)
    if bound is not None:
        return frozenset(bound)
    made: Any = factory
    if not isinstance(factory, type):
        try:
            made = typing.get_type_hints(factory).get("return")
        except Exception:  # an annotation naming what its module cannot resolve
            return None
        # A generator, async generator or coroutine function: the store is the first argument.
        while typing.get_origin(made) in _WRAPPERS and typing.get_args(made):
            made = typing.get_args(made)[0]
    if not isinstance(made, type) or made is object:
        return None
    claimed, _ = capabilities_of(made)
    return claimed or None


_WRAPPERS: Final = tuple(
    typing.get_origin(t) for t in (
        typing.Iterator[int], typing.Generator[int, None, None], typing.AsyncIterator[int],
        typing.AsyncGenerator[int, None], typing.Awaitable[int], typing.Coroutine[Any, Any, int],
        typing.Iterable[int], typing.AsyncIterable[int],
    )
)


class Handle:
    """One store handle seen through the async contract, whatever its methods are.

    Every exception a store method raises is also appended to ``errors`` (shared by
    the handles of one clause), so a failure can name the store's *first* error when
    later calls only fail because of it (a poisoned connection). ``after_first`` holds
    whether each call on this handle after its first unexpected error succeeded: a
    poisoned handle fails every one of them.
    """

    def __init__(self, store: object, label: str, errors: list[tuple[str, BaseException]]) -> None:
        claimed, partial = capabilities_of(store)
        if not claimed:
            every = ", ".join(m for ms in CAPABILITIES.values() for m in ms)
            raise StoreShapeError(
                f"the {label} returned {store!r}, which has none of the methods of a store "
                f"({every}; see storetest.Store). Did the factory forget to return the store?"
            )
        methods = [m for c in sorted(claimed) for m in CAPABILITIES[c]]
        kinds = {m: inspect.iscoroutinefunction(getattr(store, m)) for m in methods}
        if len(set(kinds.values())) != 1:
            async_ones = sorted(m for m, is_async in kinds.items() if is_async)
            raise StoreShapeError(
                f"the store from the {label} mixes async and plain methods (async: "
                f"{', '.join(async_ones)}); make them all async, or all plain"
            )
        self.raw = store
        self.label = label
        self.capabilities = claimed
        self.partial = partial
        self.is_async = next(iter(kinds.values()))
        #: Async methods that hand a plain store's calls to threads (a binding of a sync
        #: history says so): a race of them is a race of threads.
        self.threaded = bool(getattr(store, "storetest_threaded", False))
        self.errors = errors
        self.first_error: BaseException | None = None
        self.after_first: list[bool] = []
        self.roots = code_roots(store)
        self.watch = stops.current()
        #: A binding's names for its methods, as its protocol has them (a LangChain
        #: history's ``messages`` for ``get_items``), for messages.
        self.names: Mapping[str, str] = getattr(store, "storetest_names", None) or {}

    async def call(self, name: str, *args: object) -> Any:
        method = getattr(self.raw, name)
        session = args[0] if args and isinstance(args[0], str) else ""
        shown = self.names.get(name, name)
        what = f"{shown}({session!r}{', ...' if len(args) > 1 else ''}) on the {self.label}'s store"
        try:
            if self.is_async:
                result = await self.watch.call(what, session, lambda: method(*args), thread=False)
            elif not races.in_race() and (clause := stops.clause_here()) is not None:
                # Alone on the loop, on the clause's own thread: called right here.
                result = clause.call(what, session, lambda: method(*args))
            else:
                barrier = races.start_line()
                racing = races.in_plain_race()

                def run() -> Any:
                    if not racing:
                        return method(*args)
                    races.wait_at(barrier)
                    with races.preemptible(self.roots):
                        return method(*args)

                result = await self.watch.call(what, session, lambda: asyncio.to_thread(run),
                                               thread=True)
        except StoreShapeError as exc:  # a binding's opener gave no session: the set-up's error
            raise SetupFailure(exc) from exc
        except (KeyboardInterrupt, SystemExit) as exc:
            # Raised by the store's own code (Ctrl-C never raises inside a run): its failure.
            error = StoreExit(f"{shown}() raised {type(exc).__name__}{f': {exc}' if str(exc) else ''} "
                              "(a store method must not stop the program)")
            self._outcome(error)
            self.errors.append((f"{shown}() on the {self.label}'s store", error))
            raise error from exc
        except Exception as exc:
            self._outcome(exc)
            self.errors.append((f"{shown}() on the {self.label}'s store", exc))
            raise
        self._outcome(None)
        return result

    def _outcome(self, error: BaseException | None) -> None:
        if self.first_error is not None:
            self.after_first.append(error is None)
        elif error is not None and not isinstance(error, (TypeError, ValueError)):
            self.first_error = error

    async def save(self, session: object, messages: object) -> None:
        await self.call("save", session, messages)

    async def messages(self, session: object) -> list[Message]:
        return await self.call("messages", session)  # type: ignore[no-any-return]

    async def add_steer(self, session: object, text: object) -> None:
        await self.call("add_steer", session, text)

    async def take_steers(self, session: object) -> list[str]:
        return await self.call("take_steers", session)  # type: ignore[no-any-return]


#: The coroutines of a Handle's own calls (what clauses pass to :meth:`Target.run`).
_CALLS: Final = frozenset(f.__code__ for f in (Handle.call, Handle.save, Handle.messages, Handle.add_steer,
                                               Handle.take_steers))


@dataclass
class Target:
    """Everything one clause needs. Made fresh for every clause."""

    clause: str
    store: Handle
    replica: Handle | None
    loop: asyncio.AbstractEventLoop
    profile: Profile
    seed: int
    #: Short and random per run, carried by the replay command: with the seed it
    #: fixes every session id, so a replay names the same sessions.
    nonce: str
    #: Keeps the sessions of different clauses apart on one database.
    tag: str = "c"
    errors: list[tuple[str, BaseException]] = field(default_factory=list)
    #: What the store cleanly refused and the protocol does not promise (an id over a
    #: backend's length limit): listed in the report as its limits, not failures.
    limits: list[str] = field(default_factory=list)
    #: The factory and the values its parameters got, for clauses that open more
    #: handles (a fresh backend, child processes: :mod:`storetest._engine.backends`).
    factory: Callable[..., Any] | None = None
    fixtures: Mapping[str, Any] = field(default_factory=dict)
    #: Opens the same data anew, in any process (``check(reopen=...)``), for the crash clauses.
    reopen: Callable[..., Any] | None = None
    #: What a clause found that is no failure (a crash clause's kills and figures): the
    #: diagnosis of a clause that passed.
    findings: list[str] = field(default_factory=list)
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}:{self.clause}")
        #: Where a progress display reads how far the clause has got (``examples``).
        self.progress: Any = None
        #: The run's deadline and Ctrl-C (see :mod:`storetest._engine.stops`).
        self.watch = stops.current()

    def tick(self) -> None:
        """One more example, round or state-machine run done (for progress displays)."""
        if self.progress is not None:
            self.progress.examples += 1

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the store's event loop and return its result (Ctrl-C
        cancels it and raises ``storetest._engine.stops.Interrupt``)."""
        if getattr(work, "cr_code", None) in _CALLS and not races.in_race() and stops.clause_here() is not None:
            handle = work.cr_frame.f_locals.get("self")  # type: ignore[attr-defined]
            if isinstance(handle, Handle) and not handle.is_async:
                # A plain store's call on the clause's thread waits for nothing: finished
                # right here, without a task and a turn of the loop (most of a clause's runs).
                return stops.finish_now(work)
        return self.watch.run(self.loop, work)

    def supervised(self, work: Callable[[], T]) -> T:
        """``work()`` (a clause's code) on a thread of its own under :meth:`Watch.supervise`
        when every handle is plain; on the event loop's thread when one is async, as a
        store may be bound to the thread its factory made it on (the loop's too)."""
        if any(h.is_async for h in self.handles()):
            home = stops.loop_thread_of(self.loop)
            # On the loop's thread, this thread watching: a store that blocks the loop
            # cannot block the watch on its deadline.
            return home.call(work) if home is not None else work()
        return self.watch.supervise(work)

    def new_session(self, label: str = "s") -> str:
        """A session id nobody has used: ``st-<nonce>-<clause tag><n>-<label>``."""
        return f"st-{self.nonce}-{self.tag}{next(self._counter)}-{label}"

    def handles(self) -> Sequence[Handle]:
        return (self.store,) if self.replica is None else (self.store, self.replica)

    def has(self, capability: str) -> bool:
        """Whether every handle claims ``capability`` (``"steers"``, ...)."""
        return all(capability in h.capabilities for h in self.handles())

    def race(self, calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
        """Start every call at the same moment (see :mod:`storetest._engine.races`), wait for all."""
        # Mixed handles (one async, one plain) race without the barrier.
        threads = not any(h.is_async for h in self.handles())
        return self.run(races.together(calls, threads=threads))


#: Set inside :func:`open_target`: a target opened within one is a clause's own (nested).
_OPENED: contextvars.ContextVar[bool] = contextvars.ContextVar("storetest_opened", default=False)


def new_nonce() -> str:
    return os.urandom(3).hex()


def new_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    loop.set_default_executor(stops.DaemonPool("storetest"))
    return loop


def parameter_names(fn: Callable[..., Any]) -> list[str]:
    """The parameters a factory needs filled (those without defaults)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty
    ]


@contextmanager
def open_target(
    clause: str,
    factory: Callable[..., Any],
    replica: Callable[..., Any] | None,
    fixtures: Mapping[str, Any],
    profile: Profile,
    seed: int,
    nonce: str,
    tag: str = "c",
) -> Iterator[Target]:
    """A fresh event loop, the store (and replica) from their factories, and the
    :class:`Target` over them; afterwards every factory is torn down and the loop closed.

    ``fixtures`` holds the values the factories' parameters name; a replica parameter
    named ``primary`` receives the store ``factory`` made.

    :raises FactoryError: a factory raised while opening or tearing down.
    :raises StoreShapeError: a factory returned something that is not a store.
    """
    watch = stops.current()
    if stops.left_behind():
        raise stops.Left
    nested = _OPENED.get()  # inside a clause's own target (the crash clauses reopen the data)
    token = _OPENED.set(True)
    loop = new_loop()
    home = stops.LoopThread(watch, loop)
    outer_loop, watch.loop = watch.loop, loop
    if not nested:
        watch.abandoned = []
    # This clause's (a nested target shares it, and is left with it), whatever list a
    # later clause has by the time a clause left behind unwinds through here.
    abandoned = watch.abandoned
    closers: list[Any] = []
    errors: list[tuple[str, BaseException]] = []
    try:
        store = _opened(watch, loop, "factory", factory, fixtures, closers)
        second = None
        if replica is not None:
            opened = _opened(watch, loop, "replica factory", replica, {**fixtures, "primary": store}, closers)
            second = Handle(opened, "replica factory", errors)
        target = Target(clause, Handle(store, "factory", errors), second, loop, profile, seed, nonce, tag, errors,
                        factory=factory, fixtures=fixtures)
        target.watch = watch
        yield target
    except BaseException as exc:
        # Cleanup never replaces the error that is already on its way out.
        try:
            _teardown(loop, closers, watch, abandoned)
        except FactoryError as teardown:
            exc.add_note(f"and then: {teardown}")
        raise
    else:
        _teardown(loop, closers, watch, abandoned)
    finally:
        if abandoned or stops.left_behind() or home.clause.left:
            # A thread is still in the store: leave the loop and the factories as they are.
            watch.kept += [loop, closers]
        else:
            home.call(lambda: loop.run_until_complete(loop.shutdown_asyncgens()))
            home.call(lambda: loop.run_until_complete(loop.shutdown_default_executor()))
            loop.close()
        home.stop()
        if not nested:
            watch.loop = None
        elif watch.loop is loop:  # not a left clause's, unwinding while a later one runs
            watch.loop = outer_loop
        _OPENED.reset(token)


def _teardown(loop: asyncio.AbstractEventLoop, closers: list[Any], watch: stops.Watch,
              abandoned: list[str]) -> None:
    """Tear the factories down, once no thread is in the store any more: after Ctrl-C
    a plain call may still be running (up to the deadline); one still in the store then
    is abandoned (on the clause's ``abandoned``), and so is the teardown."""
    pool = loop._default_executor  # type: ignore[attr-defined]
    if not abandoned and isinstance(pool, stops.DaemonPool) and not pool.wait_idle(watch.timeout):
        abandoned.append("a plain call still running when the clause ended")
    if not abandoned:
        _close_all(loop, closers, abandoned)


def _opened(watch: stops.Watch, loop: asyncio.AbstractEventLoop, label: str, fn: Callable[..., Any],
            available: Mapping[str, Any], closers: list[Any]) -> Any:
    """The store ``fn`` makes, on the loop's thread."""
    try:
        return watch.run(loop, _open(label, fn, available, closers))
    except stops.StuckCall as stuck:  # the loop's thread, left behind by the thread watching it
        raise FactoryError(label, "making the store", stuck) from stuck


async def _open(label: str, fn: Callable[..., Any], available: Mapping[str, Any], closers: list[Any]) -> Any:
    try:
        return await enter_factory(label, fn, available, closers)
    except stops.Interrupt:
        raise
    except (Exception, SystemExit, KeyboardInterrupt, stops.StuckCall) as exc:
        # A factory's sys.exit() or KeyboardInterrupt is its failure, not the run's end
        # (Ctrl-C never raises inside a run), and so is a factory that never returns.
        raise FactoryError(label, "making the store", exc) from exc


async def enter_factory(label: str, fn: Callable[..., Any], available: Mapping[str, Any],
                        closers: list[Any]) -> Any:
    """Call a factory (plain, async, or a generator of either) with the values its
    parameters name, each step within the run's call deadline; a generator's teardown
    goes on ``closers`` as ``(label, gen)``."""
    watch = stops.current()
    what = f"the {label}"
    result = watch.plain(what, lambda: fn(**{n: available[n] for n in parameter_names(fn)}))
    if inspect.isasyncgen(result):
        closers.append((label, result))
        return await watch.step(what, result.__anext__())
    if inspect.isgenerator(result):
        closers.append((label, result))
        return watch.plain(what, lambda: next(result))
    if inspect.isawaitable(result):
        return await watch.step(what, result)
    return result


def _close_all(loop: asyncio.AbstractEventLoop, closers: list[Any], abandoned: list[str] | None = None) -> None:
    """Tear down every factory, newest first; one failing does not skip the rest (one
    whose thread was left behind does)."""
    watch = stops.current()
    errors = []
    for label, closer in reversed(closers):
        if abandoned:
            break
        try:
            watch.run(loop, _close(closer, f"the {label}"), interruptible=False)
        except (Exception, SystemExit, KeyboardInterrupt, stops.StuckCall) as exc:
            errors.append(FactoryError(label, "tearing the store down", exc))
    if errors:
        raise errors[0] from errors[0].error


async def close_factory(generator: Any) -> None:
    """Run a generator factory's teardown (the code after its one ``yield``)."""
    await _close(generator, "the factory")


async def _close(generator: Any, what: str) -> None:
    watch = stops.current()
    try:
        if inspect.isasyncgen(generator):
            await watch.step(what, generator.__anext__())
        else:
            watch.plain(what, lambda: next(generator), making=False)
    except (StopIteration, StopAsyncIteration):
        return
    raise RuntimeError(f"the store factory {generator!r} yielded twice; it must yield the store once")
