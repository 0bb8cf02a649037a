"""The binding for a LangGraph checkpointer (``langgraph.checkpoint.base.BaseCheckpointSaver``),
in one line::

    run_conformance(checkpointers(saver_on_a_file))

:func:`checkpointers` takes an *outer factory*: its parameters are fixtures
(``tmp_path``, ``storetest_postgres_url``...) and it returns (or yields, tearing down
after) one saver on a backend. The binding calls it once per handle (twice in a replica
clause, with the same fixtures, so both savers reach one database), calls the saver's
``setup()`` before the handle's first call when it has one (LangGraph's database savers
need it; several handles' first calls on a fresh backend race it), and drives:

- the async methods (``aput``, ``aput_writes``, ``aget_tuple``, ``alist``,
  ``adelete_thread``) on the first handle when the saver overrides them, else the sync
  ones, each on a thread of its own;
- the other API on the replica handle when the saver overrides both, so the replica
  clauses cross them, and a clause writes through one and reads through the other.

A saver that overrides only one API is judged on it, and the report says which
(:func:`apis_of`); ``checkpointers(factory, api="async")`` names the one API to drive,
for a saver whose other API's methods only raise. The optional ``copy_thread``,
``prune`` and ``delete_for_runs``: a handle has them where the saver overrides them, else
their clauses are not claimed (:func:`optional_of`). The clauses send LangGraph's own
values: checkpoints built by :func:`checkpoint`, versions from the saver's
``get_next_version``. LangGraph is imported when first needed, never by ``import
storetest``; without it the error names ``storetest[langgraph]``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

from storetest._engine.harness import close_factory, enter_factory
from storetest.bindings._support import close_resource, enter_made, exit_manager, look_like, run_all

__all__ = ["CHECKPOINT_METHODS", "OPTIONAL", "CheckpointSaver", "Checkpointers", "apis_of", "checkpoint",
           "checkpointers", "langgraph", "optional_of"]

#: What the clauses call on a handle (positional; the first argument is the thread id).
CHECKPOINT_METHODS: Final = ("put_checkpoint", "put_writes", "get_checkpoint", "list_checkpoints", "delete_thread")
#: A saver's methods the binding drives, sync and async.
SYNC: Final = ("put", "put_writes", "get_tuple", "list", "delete_thread")
ASYNC: Final = tuple(f"a{m}" for m in SYNC)
#: The base class's optional methods (each with an async twin), claimed by overriding them.
OPTIONAL: Final = ("copy_thread", "prune", "delete_for_runs")

_MISSING: Final = "the LangGraph binding needs langgraph-checkpoint: pip install 'storetest[langgraph]'"


def langgraph() -> Any:
    """The LangGraph names the binding uses, as a namespace (``BaseCheckpointSaver``,
    ``WRITES_IDX_MAP``, ``uuid6``, ``LATEST_VERSION``).

    :raises ImportError: langgraph-checkpoint is not installed (the message names ``storetest[langgraph]``).
    """
    try:
        from langgraph.checkpoint.base import LATEST_VERSION, WRITES_IDX_MAP, BaseCheckpointSaver
        from langgraph.checkpoint.base.id import uuid6
    except ImportError as exc:
        raise ImportError(_MISSING) from exc
    import types

    return types.SimpleNamespace(BaseCheckpointSaver=BaseCheckpointSaver, WRITES_IDX_MAP=WRITES_IDX_MAP,
                                 uuid6=uuid6, LATEST_VERSION=LATEST_VERSION)


def checkpoint(values: Mapping[str, Any], versions: Mapping[str, Any], *, seen: Mapping[str, Any] | None = None,
               ts: str = "2026-01-01T00:00:00.000001+00:00", checkpoint_id: str | None = None) -> dict[str, Any]:
    """A LangGraph ``Checkpoint``: ``values`` by channel, every channel's version, what
    each node has seen, a new monotonically increasing id (``uuid6``) unless given."""
    lg = langgraph()
    return {"v": lg.LATEST_VERSION, "id": checkpoint_id or str(lg.uuid6(clock_seq=-1)), "ts": ts,
            "channel_values": dict(values), "channel_versions": dict(versions),
            "versions_seen": {k: dict(v) for k, v in (seen or {}).items()}, "pending_sends": [],
            "updated_channels": sorted(values)}


def apis_of(saver: Any) -> tuple[str, ...]:
    """Which of LangGraph's two APIs ``saver`` overrides in full: ``("async", "sync")``,
    one of them, or ``()`` (the base class's methods raise ``NotImplementedError``);
    ``delete_thread`` is not required."""
    base = langgraph().BaseCheckpointSaver
    out = []
    for name, methods in (("async", ASYNC), ("sync", SYNC)):
        if all(getattr(type(saver), m, None) is not getattr(base, m) for m in methods[:4]):
            out.append(name)
    return tuple(out)


def optional_of(saver: Any) -> dict[str, tuple[str, ...]]:
    """The optional methods ``saver`` overrides, each with the APIs it overrides it in
    (``{"prune": ("async", "sync")}``)."""
    base = langgraph().BaseCheckpointSaver
    found = {name: tuple(api for api, method in (("async", f"a{name}"), ("sync", name))
                         if getattr(type(saver), method, None) is not getattr(base, method)) for name in OPTIONAL}
    return {name: apis for name, apis in found.items() if apis}


def _optional(name: str, keywords: tuple[str, ...] = ()) -> Any:
    async def call(self: CheckpointSaver, *args: Any) -> None:
        cut = len(args) - len(keywords)
        await self._do(name, self._api_of(name), *args[:cut], **dict(zip(keywords, args[cut:], strict=True)))
    return call


#: The handle's method for each optional method, present when the saver claims it.
_OPTIONAL_METHODS: Final = {"copy_thread": _optional("copy_thread"), "prune": _optional("prune", ("strategy",)),
                            "delete_for_runs": _optional("delete_for_runs")}


def _config(thread: str, ns: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    ids = {} if checkpoint_id is None else {"checkpoint_id": checkpoint_id}
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, **ids}}


def plain(found: Any) -> dict[str, Any] | None:
    """A ``CheckpointTuple`` as what the clauses compare: ``thread``, ``ns``, ``id``,
    ``checkpoint``, ``metadata``, ``parent`` (the parent config's ``configurable``, or
    ``None``) and ``writes`` (``[task_id, channel, value]`` lists)."""
    if found is None:
        return None
    conf = dict((found.config or {}).get("configurable", {}))
    parent = found.parent_config
    return {"thread": conf.get("thread_id"), "ns": conf.get("checkpoint_ns"), "id": conf.get("checkpoint_id"),
            "checkpoint": found.checkpoint, "metadata": found.metadata,
            "parent": None if parent is None else dict(parent.get("configurable", {})),
            "writes": [list(w) for w in (found.pending_writes or [])]}


class CheckpointSaver:
    """One handle on a LangGraph saver, as the clauses drive it: thread id first, its
    ``api`` (``"async"`` or ``"sync"``) unless a call names the other."""

    def __init__(self, saver: Any, label: str, api: str, apis: tuple[str, ...]) -> None:
        self.saver = saver
        self.label = label
        self.api = api
        self.apis = apis
        #: The sync API runs each call on a thread (abandoned, not cancelled, past the deadline).
        self.storetest_threaded = api == "sync"
        self._ready: asyncio.Task[None] | None = None

    def storetest_code(self) -> list[Any]:
        return [self.saver]

    def _api_of(self, name: str) -> str:
        overridden = optional_of(self.saver).get(name, ())  # this handle's API, else the one overriding it
        return self.api if self.api in overridden or not overridden else overridden[0]

    async def _setup(self) -> None:
        setup = getattr(self.saver, "setup", None)
        if callable(setup):
            done = setup() if asyncio.iscoroutinefunction(setup) else await asyncio.to_thread(setup)
            if asyncio.iscoroutine(done):
                await done

    async def _do(self, name: str, api: str, *args: Any, **kwargs: Any) -> Any:
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._setup())
        await asyncio.shield(self._ready)
        if (api or self.api) == "async":
            method = getattr(self.saver, f"a{name}")
            if name == "list":
                return [x async for x in method(*args, **kwargs)]
            return await method(*args, **kwargs)
        method = getattr(self.saver, name)
        if name == "list":
            return await asyncio.to_thread(lambda: list(method(*args, **kwargs)))
        return await asyncio.to_thread(functools.partial(method, *args, **kwargs))

    async def put_checkpoint(self, thread: str, ns: str, parent: str | None, cp: dict[str, Any],
                             metadata: dict[str, Any], versions: dict[str, Any], api: str = "") -> Any:
        """``put`` with the parent's id in the config; the config the saver returned."""
        return await self._do("put", api, _config(thread, ns, parent), cp, metadata, versions)

    async def put_writes(self, thread: str, ns: str, checkpoint_id: str, writes: Sequence[tuple[str, Any]],
                         task_id: str, task_path: str = "", api: str = "") -> None:
        await self._do("put_writes", api, _config(thread, ns, checkpoint_id), list(writes), task_id, task_path)

    async def get_checkpoint(self, thread: str, ns: str, checkpoint_id: str | None = None,
                             api: str = "") -> dict[str, Any] | None:
        return plain(await self._do("get_tuple", api, _config(thread, ns, checkpoint_id)))

    async def list_checkpoints(self, thread: str, ns: str | None, filter: dict[str, Any] | None = None,
                               before: str | None = None, limit: int | None = None,
                               api: str = "") -> list[dict[str, Any] | None]:
        config = {"configurable": {"thread_id": thread, **({} if ns is None else {"checkpoint_ns": ns})}}
        found = await self._do("list", api, config, filter=filter,
                               before=None if before is None else _config(thread, ns or "", before), limit=limit)
        return [plain(x) for x in found]

    async def delete_thread(self, thread: str, api: str = "") -> None:
        await self._do("delete_thread", api, thread)

    def next_version(self, current: Any) -> Any:
        """The saver's own next channel version after ``current``."""
        return self.saver.get_next_version(current, None)

    def __repr__(self) -> str:
        return (f"<LangGraph saver from the {self.label}, driven through its {self.api} API: "
                f"{type(self.saver).__name__}>")


class Checkpointers:
    """A store factory made of an outer factory (see :func:`checkpointers`)."""

    __qualname__: str  # the outer factory's (set by look_like)

    def __init__(self, factory: Any, label: str = "factory", api: str | None = None) -> None:
        if api not in (None, "async", "sync"):
            raise ValueError(f"checkpointers(api=...) takes 'async' or 'sync', not {api!r}")
        if not callable(factory):
            raise TypeError(f"checkpointers() takes the outer factory (fixtures in, a LangGraph saver out), not "
                            f"{type(factory).__name__}; e.g. checkpointers(lambda: InMemorySaver())")
        self.factory = factory
        self.label = label
        self.api = api
        look_like(self, factory, "checkpointers")
        # The optional ones too: which a saver claims is known once it is made.
        self.storetest_capabilities = ("checkpoints", *OPTIONAL)
        self.storetest_spawn = (factory, {None: checkpointers, "async": _async_only, "sync": _sync_only}[api])
        if label == "factory":
            self.storetest_replica: Checkpointers | None = Checkpointers(factory, "replica", api)

    def __call__(self, **fixtures: Any) -> AsyncIterator[CheckpointSaver]:
        return self._handle(fixtures)

    async def _handle(self, fixtures: dict[str, Any]) -> AsyncIterator[CheckpointSaver]:
        closers: list[Any] = []
        entered: list[Any] = []
        saver: Any = None
        try:
            saver = await enter_made(await enter_factory(self.label, self.factory, fixtures, closers), _is_saver,
                                    entered)
            if not hasattr(saver, "get_next_version") or not _is_saver(saver):
                raise TypeError(f"the {self.label} of checkpointers returned {saver!r}: it must return a LangGraph "
                                "saver (a langgraph.checkpoint.base.BaseCheckpointSaver)")
            apis = apis_of(saver)
            if self.api is not None:
                if self.api not in apis:
                    raise TypeError(f"checkpointers(api={self.api!r}): the {self.label} returned "
                                    f"{type(saver).__name__}, which does not override all of "
                                    f"{', '.join((ASYNC if self.api == 'async' else SYNC)[:4])}")
                apis = (self.api,)
            if not apis:
                raise TypeError(f"the {self.label} of checkpointers returned {type(saver).__name__}, which overrides "
                                f"neither all of {', '.join(SYNC[:4])} nor all of {', '.join(ASYNC[:4])}")
            api = apis[-1] if self.label == "replica" else apis[0]
            # Named after the saver's class, so a report names what it judged.
            optional = {name: _OPTIONAL_METHODS[name] for name in optional_of(saver)}
            yield type(type(saver).__name__, (CheckpointSaver,), optional)(saver, self.label, api, apis)
        finally:
            await run_all([functools.partial(_close, saver)] + [functools.partial(exit_manager, c) for c in entered]
                          + [functools.partial(close_factory, c) for _, c in reversed(closers)])

    def __repr__(self) -> str:
        return f"checkpointers({self.__module__}:{self.__qualname__})"


def _is_saver(made: Any) -> bool:
    return callable(getattr(made, "get_tuple", None))


async def _close(saver: Any) -> None:
    # A saver the factory opened as a context manager is closed by the factory's teardown.
    if saver is not None and not hasattr(saver, "__aexit__") and not hasattr(saver, "__exit__"):
        await close_resource(saver)


def checkpointers(factory: Any, *, api: str | None = None) -> Checkpointers:
    """Bind a LangGraph checkpointer for :func:`~storetest.run_conformance`,
    :func:`storetest.check` and ``storetest check``.

    :param factory: the outer factory: a plain or async function, or a (async)
        generator that tears down after its ``yield``, returning a saver or a context
        manager that gives one (``AsyncSqliteSaver.from_conn_string(...)``, entered and
        exited by the binding); its parameters are fixtures, filled by name. Called
        twice with the same fixtures, it must give two savers on one backend: the
        replica clauses use the second.
    :param api: ``"async"`` or ``"sync"``: drive that API only, for a saver that
        overrides the other's methods only to raise (``NotImplementedError``: "use the
        async saver"); default, every API the saver overrides in full (:func:`apis_of`).
    :raises TypeError: ``factory`` is not callable.
    :raises ValueError: ``api`` is neither.
    """
    return Checkpointers(factory, api=api)


def _async_only(factory: Any) -> Checkpointers:
    """``checkpointers(factory, api="async")``, importable by a spawned child."""
    return Checkpointers(factory, api="async")


def _sync_only(factory: Any) -> Checkpointers:
    """``checkpointers(factory, api="sync")``, importable by a spawned child."""
    return Checkpointers(factory, api="sync")
