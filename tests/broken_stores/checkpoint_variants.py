"""Broken LangGraph checkpointers: LangGraph's own ``InMemorySaver`` (which passes every
checkpoint clause: tests/test_conformance_langgraph.py) changed in one place each, to
carry one bug a saver can have. Each overrides the sync method its async twin calls,
so both APIs carry the bug, unless the bug is in the async path (a race)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from storetest import checkpointers
from tests.broken_stores import BrokenStore
from tests.checkpointers import memory_saver


def _with(tup: CheckpointTuple, **configurable: Any) -> CheckpointTuple:
    config = {"configurable": {**tup.config["configurable"], **configurable}}
    parent = tup.parent_config and {"configurable": {**tup.parent_config["configurable"], **configurable}}
    return tup._replace(config=config, parent_config=parent)


def _strings(value: Any, change: Any) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, change) for v in value]
    return value


class NonAtomicPutWrites(InMemorySaver):
    """``aput_writes`` loads the checkpoint's writes, adds its own, and saves them back,
    with a round trip in between (a JSON file or column rewritten whole)."""

    async def aput_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        c = config["configurable"]
        key = (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])
        loaded = dict(self.writes.get(key, {}))
        await asyncio.sleep(0)  # the file's read and write
        for idx, (channel, value) in enumerate(writes):
            loaded.setdefault((task_id, WRITES_IDX_MAP.get(channel, idx)),
                              (task_id, channel, self.serde.dumps_typed(value), task_path))
        self.writes[key] = loaded


class ColonJoinedKeys(InMemorySaver):
    """Keys a checkpoint by the string ``thread:ns``, unescaped: thread ``x:b`` in
    namespace ``c`` and thread ``x`` in namespace ``b:c`` share one key."""

    @staticmethod
    def _joined(config: Any) -> Any:
        c = config["configurable"]
        joined = {**c, "thread_id": f"{c['thread_id']}:{c.get('checkpoint_ns', '')}", "checkpoint_ns": ""}
        return {**config, "configurable": joined}

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        super().put(self._joined(config), checkpoint, metadata, new_versions)
        return {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        super().put_writes(self._joined(config), writes, task_id, task_path)

    def get_tuple(self, config: Any) -> Any:
        found = super().get_tuple(self._joined(config))
        c = config["configurable"]
        return found and _with(found, thread_id=c["thread_id"], checkpoint_ns=c.get("checkpoint_ns", ""))

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        c = config["configurable"]
        for found in super().list(self._joined(config), **kwargs):
            yield _with(found, thread_id=c["thread_id"], checkpoint_ns=c.get("checkpoint_ns", ""))


class ListedByTimestamp(InMemorySaver):
    """Lists newest first by the checkpoint's ``ts``, not by its id."""

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> Iterator[Any]:
        found = sorted(super().list(config, filter=filter, before=before), key=lambda x: x.checkpoint["ts"],
                       reverse=True)
        yield from found if limit is None else found[:limit]


class LimitBeforeFilter(InMemorySaver):
    """Takes the newest ``limit`` checkpoints, then applies the metadata filter (a
    ``LIMIT`` in SQL, the filter in Python afterwards)."""

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> Iterator[Any]:
        for found in super().list(config, before=before, limit=limit):
            if not filter or all(found.metadata.get(k) == v for k, v in filter.items()):
                yield found


class BeforeInclusive(InMemorySaver):
    """``before`` includes the checkpoint it names (``<=`` for ``<``)."""

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> Iterator[Any]:
        bound = before and before["configurable"].get("checkpoint_id")
        found = [x for x in super().list(config, filter=filter)
                 if not bound or x.config["configurable"]["checkpoint_id"] <= bound]
        yield from found if limit is None else found[:limit]


class FilterIgnored(InMemorySaver):
    """Ignores the metadata filter of ``list`` (as langgraph-checkpoint-lmdb 0.3.1 does)."""

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> Iterator[Any]:
        return super().list(config, before=before, limit=limit)


class LimitZeroIsNoLimit(InMemorySaver):
    """Reads ``limit=0`` as no limit (``if limit:``)."""

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> Iterator[Any]:
        return super().list(config, filter=filter, before=before, limit=limit or None)


class NamespaceIgnored(InMemorySaver):
    """``list`` of a thread gives every namespace's checkpoints, whatever namespace the
    config names."""

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        return super().list({"configurable": {"thread_id": config["configurable"]["thread_id"]}}, **kwargs)


class NulStripped(InMemorySaver):
    """Drops NUL from string channel values, as the base class does from metadata."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        values = _strings(checkpoint["channel_values"], lambda s: s.replace("\x00", ""))
        return super().put(config, {**checkpoint, "channel_values": values}, metadata, new_versions)


class NulRefused(InMemorySaver):
    """Refuses a string channel value with a NUL (a Postgres text or jsonb column)."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        _strings(checkpoint["channel_values"], self._refuse)
        return super().put(config, checkpoint, metadata, new_versions)

    @staticmethod
    def _refuse(s: str) -> str:
        if "\x00" in s:
            raise ValueError("unsupported Unicode escape sequence: \\u0000 cannot be converted to text")
        return s


class BytesDecoded(InMemorySaver):
    """Keeps ``bytes`` channel values as text, decoded as latin-1 (a text column)."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        values = {k: v.decode("latin-1") if isinstance(v, bytes) else v
                  for k, v in checkpoint["channel_values"].items()}
        return super().put(config, {**checkpoint, "channel_values": values}, metadata, new_versions)


class TextCut(InMemorySaver):
    """Cuts string channel values at 65,535 characters (a ``TEXT`` column)."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        values = {k: v[:65535] if isinstance(v, str) else v for k, v in checkpoint["channel_values"].items()}
        return super().put(config, {**checkpoint, "channel_values": values}, metadata, new_versions)


class NewestBlob(InMemorySaver):
    """Reads each channel's newest stored value, not the one at the checkpoint's version."""

    def _load_blobs(self, thread_id: str, checkpoint_ns: str, versions: Any) -> dict[str, Any]:
        newest = {}
        for (t, ns, channel, version) in self.blobs:
            if t == thread_id and ns == checkpoint_ns and channel in versions:
                newest[channel] = max(newest.get(channel, version), version)
        return super()._load_blobs(thread_id, checkpoint_ns, newest)


class ParentFromLatest(InMemorySaver):
    """Takes a checkpoint's parent from the thread's latest checkpoint, not from the
    ``checkpoint_id`` of the config it was put with."""

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        c = config["configurable"]
        existing = self.storage[c["thread_id"]][c["checkpoint_ns"]]
        latest = max(existing) if existing else None
        conf = {"configurable": {**c, "checkpoint_id": latest}} if latest else config
        return super().put(conf, checkpoint, metadata, new_versions)


class SpecialAppended(InMemorySaver):
    """Appends a special channel's write (``__interrupt__``...) under a new index
    instead of overwriting the task's previous one."""

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        c = config["configurable"]
        key = (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])
        stored = self.writes[key]
        for idx, (channel, value) in enumerate(writes):
            inner = (task_id, 1000 + len(stored) if channel in WRITES_IDX_MAP else idx)
            if inner in stored:
                continue
            stored[inner] = (task_id, channel, self.serde.dumps_typed(value), task_path)


class RetryDuplicates(InMemorySaver):
    """Inserts every regular write again on a retried ``put_writes`` (no key on
    ``(task_id, idx)``)."""

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        c = config["configurable"]
        key = (c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"])
        stored = self.writes[key]
        for idx, (channel, value) in enumerate(writes):
            inner = (task_id, WRITES_IDX_MAP.get(channel, idx))
            while inner in stored and inner[1] >= 0:
                inner = (inner[0], inner[1] + 1000)
            stored[inner] = (task_id, channel, self.serde.dumps_typed(value), task_path)


class WritesInInsertionOrder(InMemorySaver):
    """Gives pending writes in the order they were put, not ``(task_path, task_id, idx)``."""

    def _ordered_writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> Any:
        return list(self.writes.get((thread_id, checkpoint_ns, checkpoint_id), {}).values())


class DeleteByPrefix(InMemorySaver):
    """Deletes every thread whose id starts with the given one (``LIKE 'id%'``)."""

    def delete_thread(self, thread_id: str) -> None:
        for other in [t for t in list(self.storage) if t.startswith(thread_id)]:
            super().delete_thread(other)


class DeleteUnderSlash(InMemorySaver):
    """Deletes the thread and every thread under ``<id>/`` (threads as paths, a run's
    sub-threads deleted with it; an object store's ``Prefix=id/`` listing): deleting
    ``x`` also deletes ``x/y``. The old delete clause's threads (``x-1``, ``x:1``,
    ``x%``, ``xy``) never showed it."""

    def delete_thread(self, thread_id: str) -> None:
        for other in [t for t in list(self.storage) if t == thread_id or t.startswith(f"{thread_id}/")]:
            super().delete_thread(other)


class DeleteDefaultNamespace(InMemorySaver):
    """Deletes only the thread's default namespace (``checkpoint_ns = ''``)."""

    def delete_thread(self, thread_id: str) -> None:
        self.storage[thread_id].pop("", None)
        for key in [k for k in self.writes if k[0] == thread_id and k[1] == ""]:
            del self.writes[key]


class CachedLatest(InMemorySaver):
    """Each handle caches the latest checkpoint of a thread it has read and answers a
    read of the latest from its cache (a second handle's puts are not seen)."""

    def __init__(self, shared: InMemorySaver) -> None:
        super().__init__()
        self.storage, self.writes, self.blobs = shared.storage, shared.writes, shared.blobs
        self.cache: dict[Any, Any] = {}

    def get_tuple(self, config: Any) -> Any:
        c = config["configurable"]
        if c.get("checkpoint_id"):
            return super().get_tuple(config)
        key = (c["thread_id"], c.get("checkpoint_ns", ""))
        if key not in self.cache:
            self.cache[key] = super().get_tuple(config)
        return copy.deepcopy(self.cache[key])


class _Backend:
    def __init__(self) -> None:
        self.created = False


_TABLES: dict[str, _Backend] = {}


class SetupChecksThenCreates(InMemorySaver):
    """``setup()`` checks whether its tables exist, then creates them, with a round
    trip between and no lock: two savers starting together both create, one fails."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        shared = memory_saver(tmp_path)  # the data: one backend per directory
        self.storage, self.writes, self.blobs = shared.storage, shared.writes, shared.blobs
        self.backend = _TABLES.setdefault(str(tmp_path), _Backend())

    async def setup(self) -> None:
        if self.backend.created:
            return
        await asyncio.sleep(0.001)  # the catalogue query's round trip
        if self.backend.created:
            raise RuntimeError('relation "checkpoints" already exists')
        self.backend.created = True


def cached_latest(tmp_path: Path) -> CachedLatest:
    return CachedLatest(memory_saver(tmp_path))


def setup_checks_then_creates(tmp_path: Path) -> SetupChecksThenCreates:
    return SetupChecksThenCreates(tmp_path)


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, kind: type[InMemorySaver],
            racy: bool = False) -> BrokenStore:
    def factory(tmp_path: Path) -> InMemorySaver:
        return memory_saver(tmp_path, kind)

    factory.__name__ = factory.__qualname__ = kind.__name__
    return BrokenStore(name, bug, wild, clause, diagnosis, checkpointers(factory), racy=racy)


BROKEN = [
    _broken("cp-put-writes-not-atomic", "put_writes loads the writes, adds its own, saves them back",
            "a third-party file checkpointer (found in review upstream)", "parallel_put_writes_lose_nothing",
            "pending write(s) lost", NonAtomicPutWrites, racy=True),
    _broken("cp-colon-joined-keys", "checkpoints keyed by the unescaped string thread:ns",
            "langgraph-checkpoint-plainredis 0.1.0 (prefix:idx:{thread}:{ns})",
            "checkpoint_threads_and_namespaces_are_isolated", "without escaping the separator", ColonJoinedKeys),
    _broken("cp-listed-by-timestamp", "list ordered by the checkpoint's ts", "a saver sorting on a timestamp column",
            "checkpoint_list_filters_before_and_limit", "oldest first", ListedByTimestamp),
    _broken("cp-limit-before-filter", "the limit taken before the metadata filter",
            "a LIMIT in SQL with the filter applied in Python afterwards",
            "checkpoint_list_filters_before_and_limit", "before the filter", LimitBeforeFilter),
    _broken("cp-before-inclusive", "before includes the checkpoint it names", "a <= for a <",
            "checkpoint_list_filters_before_and_limit", "before is exclusive", BeforeInclusive),
    _broken("cp-filter-ignored", "the metadata filter of list ignored", "langgraph-checkpoint-lmdb 0.3.1",
            "checkpoint_list_filters_before_and_limit", "too many", FilterIgnored),
    _broken("cp-limit-zero-all", "limit=0 read as no limit", "an `if limit:` test",
            "checkpoint_list_filters_before_and_limit", "limit=0 read as no limit", LimitZeroIsNoLimit),
    _broken("cp-namespace-ignored", "list of a thread mixes its namespaces", "a query on thread_id alone",
            "checkpoint_threads_and_namespaces_are_isolated", "gave checkpoints of", NamespaceIgnored),
    _broken("cp-nul-stripped", "NUL dropped from string channel values", "a saver copying the base class's "
            "metadata sanitizing onto values", "checkpoint_values_keep_nul", "NUL lost", NulStripped),
    _broken("cp-nul-refused", "a string channel value with a NUL refused", "AsyncPostgresSaver (jsonb), LangGraph "
            "issue 1878", "checkpoint_values_keep_nul", "unsupported Unicode escape sequence", NulRefused),
    _broken("cp-bytes-decoded", "bytes channel values kept as latin-1 text", "a saver storing values in a text "
            "column", "checkpoints_round_trip_exactly", "decoded as text", BytesDecoded),
    _broken("cp-text-cut", "string channel values cut at 65,535 characters", "a MySQL TEXT column",
            "checkpoints_round_trip_exactly", "truncated at", TextCut),
    _broken("cp-newest-blob", "a channel's newest value read, not its version's",
            "a blob table keyed by (thread, ns, channel) without the version", "checkpoints_round_trip_exactly",
            "another write's value", NewestBlob),
    _broken("cp-parent-from-latest", "a checkpoint's parent taken from the thread's latest checkpoint",
            "a saver ignoring the incoming config's checkpoint_id", "checkpoint_parents_form_a_tree",
            "parent_config names", ParentFromLatest),
    _broken("cp-special-appended", "a special channel's write appended, not overwritten",
            "a saver indexing writes by position only", "checkpoint_writes_are_idempotent_and_ordered",
            "WRITES_IDX_MAP's channels overwrite", SpecialAppended),
    _broken("cp-retry-duplicates", "a retried put_writes stores its writes again",
            "an INSERT without a key on (task_id, idx)", "checkpoint_writes_are_idempotent_and_ordered",
            "pending writes duplicated", RetryDuplicates),
    _broken("cp-writes-insertion-order", "pending writes in insertion order", "a list appended to, never sorted",
            "checkpoint_writes_are_idempotent_and_ordered", "out of (task_path, task_id, idx) order",
            WritesInInsertionOrder),
    _broken("cp-delete-by-prefix", "delete_thread deletes every thread its id is a prefix of", "a LIKE 'id%' delete",
            "delete_thread_removes_only_that_thread", "the checkpoint is missing", DeleteByPrefix),
    _broken("cp-delete-under-slash", "delete_thread deletes the threads under <id>/ too",
            "threads as paths, sub-threads deleted with their parent; a Prefix= listing",
            "delete_thread_removes_only_that_thread", "(x and x/y", DeleteUnderSlash),
    _broken("cp-delete-default-namespace", "delete_thread deletes the default namespace only",
            "a DELETE ... WHERE checkpoint_ns = ''", "delete_thread_removes_only_that_thread",
            "left 1 checkpoint(s) in namespace 'sub'", DeleteDefaultNamespace),
    BrokenStore("cp-cached-latest", "each handle caches the latest checkpoint of a thread", "a per-process cache "
                "in front of a shared database", "checkpoint_handles_see_each_other_at_once",
                "the latest read through the", checkpointers(cached_latest)),
    BrokenStore("cp-setup-check-then-create", "setup() checks for its tables, then creates them",
                "savers creating tables on first use without a lock (AsyncPostgresSaver.setup() racing itself)",
                "checkpoint_first_calls_on_a_fresh_backend_succeed", "already exists",
                checkpointers(setup_checks_then_creates), racy=True),
]
