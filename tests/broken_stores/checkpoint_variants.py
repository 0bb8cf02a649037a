"""Broken LangGraph checkpointers: LangGraph's own ``InMemorySaver`` (which passes every
checkpoint clause: tests/test_conformance_langgraph.py) changed in one place each, to
carry one bug a saver can have. Each overrides the sync method its async twin calls,
so both APIs carry the bug, unless the bug is in the async path (a race)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import pickle
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from storetest import checkpointers
from tests.broken_stores import BrokenStore
from tests.checkpointers import FileSaver, MaintainedSaver, memory_saver


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
        joined = self._joined(config)
        # A registry of the keys each thread wrote, so delete_thread is exact (as
        # plainredis's is): the one bug is the shared key.
        self.__dict__.setdefault("keys_of", {}).setdefault(config["configurable"]["thread_id"], set()).add(
            joined["configurable"]["thread_id"])
        super().put(joined, checkpoint, metadata, new_versions)
        return {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        super().put_writes(self._joined(config), writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        for key in self.__dict__.get("keys_of", {}).pop(thread_id, set()):
            super().delete_thread(key)

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

    # Its own writes keep its cache right: the one bug is another handle's writes unseen.
    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        c = config["configurable"]
        self.cache.pop((c["thread_id"], c.get("checkpoint_ns", "")), None)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        c = config["configurable"]
        self.cache.pop((c["thread_id"], c.get("checkpoint_ns", "")), None)
        super().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        for key in [k for k in self.cache if k[0] == thread_id]:
            del self.cache[key]
        super().delete_thread(thread_id)


class DeleteInSteps(InMemorySaver):
    """``adelete_thread`` deletes the thread's checkpoints, then its blobs, then its
    writes, each a round trip of its own (three ``DELETE`` statements in autocommit, as
    the SQL savers write it), so a ``put`` landing between them keeps its checkpoint row
    and loses its values and writes."""

    async def adelete_thread(self, thread_id: str) -> None:
        self.storage.pop(thread_id, None)
        await asyncio.sleep(0.001)
        for key in [k for k in self.blobs if k[0] == thread_id]:
            del self.blobs[key]
        await asyncio.sleep(0.001)
        for key in [k for k in self.writes if k[0] == thread_id]:
            del self.writes[key]


class ThreadDocumentRewritten(InMemorySaver):
    """``put`` reads the namespace's checkpoints as one document, adds the new one and
    writes the document back, a round trip between (a JSON document per thread in a
    key-value store, one Redis key, one file), so of two handles putting at once, the
    one that writes last drops the other's checkpoint."""

    def _rewritten(self, before: dict[str, Any], config: Any, checkpoint: Any, metadata: Any,
                   new_versions: Any) -> Any:
        done = InMemorySaver.put(self, config, checkpoint, metadata, new_versions)
        c = config["configurable"]
        namespaces, ns = self.storage[c["thread_id"]], c.get("checkpoint_ns", "")
        namespaces[ns] = {**before, checkpoint["id"]: namespaces[ns][checkpoint["id"]]}
        return done

    def _read(self, config: Any) -> dict[str, Any]:
        c = config["configurable"]
        return dict(self.storage[c["thread_id"]][c.get("checkpoint_ns", "")])

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        before = self._read(config)
        time.sleep(0.002)  # the document's round trip
        return self._rewritten(before, config, checkpoint, metadata, new_versions)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        before = self._read(config)
        await asyncio.sleep(0.002)
        return self._rewritten(before, config, checkpoint, metadata, new_versions)


class SyncListDropsFilter(InMemorySaver):
    """The sync ``list``, a bridge over the async one, passes ``before`` and ``limit``
    on and drops ``filter`` (sync bridges written by hand, keyword by keyword, as
    ``AsyncSqliteSaver``'s and ``AsyncPostgresSaver``'s sync methods are)."""

    def list(self, config: Any, *, filter: Any = None, before: Any = None, limit: Any = None) -> Iterator[Any]:
        return super().list(config, before=before, limit=limit)

    async def alist(self, config: Any, *, filter: Any = None, before: Any = None,
                    limit: Any = None) -> Any:
        for found in InMemorySaver.list(self, config, filter=filter, before=before, limit=limit):
            yield found


class ThreadLockedFileSaver(FileSaver):
    """The file saver's load-update-save of its one file under a ``threading.Lock``:
    safe for the threads of one process, while two processes both load the file, each
    add their write, and the one that saves last drops the other's (a third-party file
    checkpointer, found in review upstream; any per-process lock around a shared file)."""

    _lock = threading.Lock()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            yield


def thread_locked_file_saver(tmp_path: Path) -> ThreadLockedFileSaver:
    return ThreadLockedFileSaver(tmp_path)


class CopyLatestOnly(MaintainedSaver):
    """``copy_thread`` copies each namespace's latest checkpoint, with its writes and
    blobs, and nothing older (what the base class's docstring warns against: the copy
    cannot rebuild state from its parents)."""

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        for ns, saved in self.storage.get(source_thread_id, {}).items():
            if not saved:
                continue
            latest = max(saved)
            self.storage[target_thread_id][ns] = {latest: saved[latest]}
            if (source_thread_id, ns, latest) in self.writes:
                self.writes[(target_thread_id, ns, latest)] = dict(self.writes[(source_thread_id, ns, latest)])
        for (thread, ns, channel, version), blob in list(self.blobs.items()):
            if thread == source_thread_id:
                self.blobs[(target_thread_id, ns, channel, version)] = blob


class PruneDropsSharedBlobs(MaintainedSaver):
    """``prune(keep_latest)`` deletes the blobs of every checkpoint it drops, though the
    kept checkpoint still reads those a channel it did not change carries (a blob table
    keyed by (thread, ns, channel, version), shared between checkpoints, pruned by the
    dropped checkpoints' versions)."""

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        dropped: list[tuple[str, str, str, Any]] = []
        if strategy == "keep_latest":
            for thread_id in thread_ids:
                for ns, saved in self.storage.get(thread_id, {}).items():
                    for cid, (checkpoint, _, _) in saved.items():
                        if saved and cid != max(saved):
                            versions = self.serde.loads_typed(checkpoint)["channel_versions"]
                            dropped += [(thread_id, ns, c, v) for c, v in versions.items()]
        super().prune(thread_ids, strategy=strategy)
        for key in dropped:
            self.blobs.pop(key, None)


class DeleteRunsDefaultNamespace(MaintainedSaver):
    """``delete_for_runs`` deletes the runs' checkpoints in the default namespace only
    (a ``DELETE ... WHERE checkpoint_ns = ''`` written for graphs without subgraphs)."""

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for thread_id, namespaces in self.storage.items():
            saved = namespaces.get("", {})
            for cid, (_, metadata, _) in list(saved.items()):
                if self.serde.loads_typed(metadata).get("run_id") in set(run_ids):
                    del saved[cid]
                    self.writes.pop((thread_id, "", cid), None)


class WriteBehindFileSaver(FileSaver):
    """``put_writes`` returns once its writes are in a buffer in memory, saved to the
    file with the next call (a write-behind batch; LangGraph's own ``PersistentDict``,
    which ``InMemorySaver(factory=...)`` takes, writes to disk only at ``sync`` or
    close): a process killed in between loses writes it acknowledged."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.buffered: list[tuple[Any, Any]] = []

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self.buffered.append((args, kwargs))

    def _call(self, method: Any, *args: Any, write: bool, **kwargs: Any) -> Any:
        buffered, self.buffered = self.buffered, []

        def flushed(saver: InMemorySaver, *a: Any, **k: Any) -> Any:
            for args_, kwargs_ in buffered:
                InMemorySaver.put_writes(saver, *args_, **kwargs_)
            return method(saver, *a, **k)

        return super()._call(flushed, *args, write=write or bool(buffered), **kwargs)


class FileRewrittenInPlace(FileSaver):
    """Saves its file by truncating and writing it in place, not to a temporary file
    renamed over it: a process killed during the write leaves it torn, and every later
    read fails."""

    def _save(self) -> None:
        data = ({t: dict(n) for t, n in self.storage.items()}, dict(self.writes), dict(self.blobs))
        with open(self.file, "wb") as file:
            file.write(pickle.dumps(data))


def write_behind_file_saver(tmp_path: Path) -> WriteBehindFileSaver:
    return WriteBehindFileSaver(tmp_path)


def file_rewritten_in_place(tmp_path: Path) -> FileRewrittenInPlace:
    return FileRewrittenInPlace(tmp_path)


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
    _broken("cp-delete-in-steps", "delete_thread deletes checkpoints, blobs and writes in three round trips",
            "three DELETE statements in autocommit, a put landing between them", "delete_racing_put_leaves_no_part",
            "without all of its channel values", DeleteInSteps, racy=True),
    _broken("cp-thread-document-rewritten", "put rewrites the namespace's checkpoints as one document it read "
            "before", "a JSON document per thread in a key-value store, one Redis key or file per thread",
            "checkpoint_handles_putting_to_one_thread_lose_nothing", "the checkpoint is missing",
            ThreadDocumentRewritten, racy=True),
    _broken("cp-sync-list-drops-filter", "the sync list, a bridge over the async one, drops the filter",
            "sync bridges over async savers, passed keyword by keyword (AsyncSqliteSaver, AsyncPostgresSaver)",
            "checkpoint_sync_and_async_apis_agree", "too many", SyncListDropsFilter),
    _broken("cp-copy-latest-only", "copy_thread copies each namespace's latest checkpoint only",
            "what BaseCheckpointSaver.copy_thread's docstring warns against (a copy of the head)",
            "copy_thread_copies_every_checkpoint_and_write", "the checkpoint is missing", CopyLatestOnly),
    _broken("cp-prune-drops-shared-blobs", "prune(keep_latest) deletes the blobs the kept checkpoint still reads",
            "a blob table shared between checkpoints, pruned by the dropped checkpoints' versions "
            "(AsyncPostgresSaver.prune keeps the referenced ones for this)",
            "prune_keeps_each_namespaces_latest_whole", "channel_values", PruneDropsSharedBlobs),
    _broken("cp-runs-default-namespace", "delete_for_runs deletes in the default namespace only",
            "a DELETE ... WHERE checkpoint_ns = '' written for graphs without subgraphs",
            "delete_for_runs_removes_those_runs_only", "is still listed", DeleteRunsDefaultNamespace),
    BrokenStore("cp-write-behind", "put_writes acknowledged from a buffer saved with the next call",
                "a write-behind batch; LangGraph's PersistentDict (InMemorySaver's factory=) saves at sync or close",
                "checkpoints_survive_a_crash", "acknowledged put_writes() missing",
                checkpointers(write_behind_file_saver), reopen=checkpointers(write_behind_file_saver), racy=True),
    BrokenStore("cp-file-in-place", "the saver's file truncated and rewritten in place",
                "file savers that open(path, 'wb') and dump (no temporary file and rename)",
                "checkpoints_survive_a_crash", "raised", checkpointers(file_rewritten_in_place),
                reopen=checkpointers(file_rewritten_in_place), racy=True),
    BrokenStore("cp-file-thread-locked", "a file saver's load-update-save under a threading.Lock",
                "a third-party file checkpointer (found in review upstream); any per-process lock on a shared file",
                "put_writes_from_processes_lose_nothing", "pending write(s) lost",
                # One seed in the test command, as the item process variant: its clause writes for a
                # second (20 of 20 seeds: python scripts/kill_seeds.py --all --only cp-file-thread-locked).
                checkpointers(thread_locked_file_saver)),
]
