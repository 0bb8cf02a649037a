"""What a clause runs against: the store under test (and its replica) behind one async
interface, the event loop they live on, fresh session ids, and Hypothesis settings.

Async stores are driven by tasks on one event loop (an asyncpg pool must stay on the
loop that made it); sync stores by threads. That difference lives here and nowhere else.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import settings as Settings

from storetest.contract import Message

T = TypeVar("T")

_METHODS = ("save", "messages", "add_steer", "take_steers")

#: Threads a sync store is driven from at once; enough for the concurrency clauses.
MAX_THREADS = 32


class StoreShapeError(TypeError):
    """The factory gave something that is not a store (a misconfigured run_conformance)."""


class Handle:
    """One store handle seen through the async contract, whatever its methods are."""

    def __init__(self, store: object, label: str) -> None:
        missing = [m for m in _METHODS if not callable(getattr(store, m, None))]
        if missing:
            raise StoreShapeError(
                f"the {label} factory returned {store!r}, which has no {', '.join(missing)} "
                f"method; a store needs save, messages, add_steer and take_steers "
                f"(see storetest.Store). Did the factory forget to return the store?"
            )
        kinds = {m: inspect.iscoroutinefunction(getattr(store, m)) for m in _METHODS}
        if len(set(kinds.values())) != 1:
            async_ones = sorted(m for m, is_async in kinds.items() if is_async)
            raise StoreShapeError(
                f"the {label} store mixes async and plain methods (async: {', '.join(async_ones)}); "
                "make all four async, or all four plain"
            )
        self.raw = store
        self.is_async = next(iter(kinds.values()))
        self.label = label

    async def _call(self, name: str, *args: object) -> Any:
        method = getattr(self.raw, name)
        if self.is_async:
            return await method(*args)
        return await asyncio.to_thread(method, *args)

    async def save(self, session: object, messages: object) -> None:
        await self._call("save", session, messages)

    async def messages(self, session: object) -> list[Message]:
        return await self._call("messages", session)  # type: ignore[no-any-return]

    async def add_steer(self, session: object, text: object) -> None:
        await self._call("add_steer", session, text)

    async def take_steers(self, session: object) -> list[str]:
        return await self._call("take_steers", session)  # type: ignore[no-any-return]


@dataclass
class Target:
    """Everything one clause needs. Made fresh for every clause test."""

    clause: str
    store: Handle
    replica: Handle | None
    loop: asyncio.AbstractEventLoop
    settings: Settings
    seed: int
    _namespace: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the store's event loop and return its result."""
        return self.loop.run_until_complete(work)

    def new_session(self, label: str = "s") -> str:
        """A session id nobody has used: ``st-<run>-<n>-<label>``.

        The random prefix keeps clauses, examples and test runs apart on a shared
        database, so no clause needs a clean backend.
        """
        return f"st-{self._namespace}-{next(self._counter)}-{label}"

    def handles(self) -> Sequence[Handle]:
        return (self.store,) if self.replica is None else (self.store, self.replica)


def new_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    loop.set_default_executor(ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="storetest"))
    return loop


async def gather_all(work: Sequence[Awaitable[T]]) -> list[T]:
    """``asyncio.gather`` that waits for every task before raising the first error, so
    no task is left running against the store when a clause fails."""
    results = await asyncio.gather(*work, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def parameter_names(fn: Callable[..., Any]) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    names = []
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not p.empty:
            continue
        names.append(p.name)
    return names


@contextmanager
def open_target(
    clause: str,
    factory: Callable[..., Any],
    replica: Callable[..., Any] | None,
    fixtures: dict[str, Any],
    settings: Settings,
    seed: int,
) -> Iterator[Target]:
    """A fresh event loop, the store (and replica) from their factories, and the
    :class:`Target` over them; afterwards every factory is torn down and the loop closed.

    ``fixtures`` holds the values the factories' parameters name; a replica parameter
    named ``primary`` receives the store ``factory`` made.
    """
    loop = new_loop()
    closers: list[Any] = []
    try:
        store = loop.run_until_complete(_open(factory, fixtures, closers))
        second = None
        if replica is not None:
            opened = loop.run_until_complete(_open(replica, {**fixtures, "primary": store}, closers))
            second = Handle(opened, "replica")
        yield Target(clause, Handle(store, "factory"), second, loop, settings, seed)
    finally:
        try:
            _close_all(loop, closers)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


async def _open(fn: Callable[..., Any], available: dict[str, Any], closers: list[Any]) -> Any:
    result = fn(**{n: available[n] for n in parameter_names(fn)})
    if inspect.isasyncgen(result):
        closers.append(result)
        return await result.__anext__()
    if inspect.isgenerator(result):
        closers.append(result)
        return next(result)
    if inspect.isawaitable(result):
        return await result
    return result


def _close_all(loop: asyncio.AbstractEventLoop, closers: list[Any]) -> None:
    """Tear down every factory, newest first; one failing does not skip the rest."""
    errors = []
    for closer in reversed(closers):
        try:
            loop.run_until_complete(_close(closer))
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


async def _close(generator: Any) -> None:
    try:
        if inspect.isasyncgen(generator):
            await generator.__anext__()
        else:
            next(generator)
    except (StopIteration, StopAsyncIteration):
        return
    raise RuntimeError(f"the store factory {generator!r} yielded twice; it must yield the store once")
