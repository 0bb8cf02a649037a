"""What the checkpoint clause modules share: a model of what a thread was sent (each
checkpoint's values, versions, metadata, parent and pending writes), the calls that
record what the saver raised, and the comparisons that say what differed and why.

A checkpoint is an entry with a parent pointer; a thread (and each of its namespaces)
is a tree of them. The clauses put checkpoints through :class:`Sent`, which builds
LangGraph's own values (:func:`storetest.bindings.langgraph.checkpoint`, versions from
the saver's ``get_next_version``) and remembers what a read must give back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from storetest._engine.diagnosis import describe_text, shorten
from storetest._engine.failures import RAISED, Check
from storetest._engine.harness import Handle, Target
from storetest._engine.item_diagnosis import describe_item
from storetest.bindings.langgraph import checkpoint, langgraph
from storetest.items import MISSING, first_difference

__all__ = ["NEEDS", "Record", "Sent", "describe_value", "expect_tuple", "ids_of", "read", "stored_metadata"]

NEEDS: Final = ("checkpoints",)


def describe_value(sent: object, got: object) -> str:
    """What happened to one value between the saver's ``serde`` and back."""
    if isinstance(sent, (bytes, bytearray)) and isinstance(got, str):
        return (f"{type(sent).__name__} came back as str: the value was decoded as text (keep the serde's type "
                "tag and its bytes; dumps_typed gives ('bytes', ...) for bytes)")
    if isinstance(sent, bytearray) and isinstance(got, bytes):
        return "a bytearray came back as bytes: the serde's type tag ('bytearray') was lost"
    if isinstance(sent, bytes) and isinstance(got, (bytes, bytearray)) and sent != got:
        if got == sent.replace(b"\x00", b""):
            return "NUL bytes dropped from a bytes value"
        if sent.startswith(bytes(got)):
            return f"bytes cut short: {len(got)} of {len(sent)} kept"
        return f"bytes changed: {shorten(sent, 40)} came back as {shorten(got, 40)}"
    if type(sent) is int and type(got) is int and abs(sent) < 2**53:
        return (f"the integer {sent} came back as {got}: another write's value of this channel (values read by "
                "channel, not by the checkpoint's version of it)")
    if sent is None and got is not None:
        return f"None came back as {type(got).__name__} {shorten(got, 40)}"
    if isinstance(sent, str) and isinstance(got, str):
        return describe_text(sent, got)
    if got is MISSING:
        return f"lost (it held {shorten(sent, 60)})"
    return describe_item(sent, got)


#: What the last difference found was between, for the failure's sent/got lines.
_LAST: list[tuple[object, object]] = []


def _difference(what: str, sent: object, got: object) -> str | None:
    found = first_difference(sent, got)
    if found is None:
        return None
    path, a, b = found
    _LAST[:] = [(a, b)]
    return f"{what}{path}: {describe_value(a, b)}"


@dataclass
class Record:
    """One checkpoint as sent, and what a read of it must give."""

    thread: str
    ns: str
    id: str
    parent: str | None
    values: dict[str, Any]
    versions: dict[str, Any]
    seen: dict[str, Any]
    metadata: dict[str, Any]
    ts: str
    raw_metadata: dict[str, Any]
    #: (task_path, task_id, idx) -> [task_id, channel, value]
    writes: dict[tuple[str, str, int], list[Any]] = field(default_factory=dict)

    def expected_writes(self) -> list[list[Any]]:
        return [self.writes[k] for k in sorted(self.writes)]


def stored_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata a saver keeps: LangGraph's base class drops NUL from its top-level
    strings on purpose (``get_checkpoint_metadata``)."""
    return {k: v.replace("\x00", "") if isinstance(v, str) else v for k, v in metadata.items()}


class Sent:
    """Every checkpoint a clause put, by id, with the tip of each (thread, namespace)."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}

    def prepare(self, h: Handle, thread: str, ns: str, parent: str | None, changed: Mapping[str, Any],
                metadata: Mapping[str, Any] | None = None, ts: str | None = None) -> tuple[Record, dict[str, Any],
                                                                                             dict[str, Any]]:
        """The record, the checkpoint and its ``new_versions`` for a put whose parent is
        ``parent`` (its values and versions carried on), with ``changed`` channels at new
        versions (from the saver's ``get_next_version``); not yet remembered."""
        base = self.records.get(parent) if parent else None
        values = dict(base.values) if base else {}
        versions = dict(base.versions) if base else {}
        for channel, value in changed.items():
            values[channel] = value
            versions[channel] = h.raw.next_version(versions.get(channel))  # type: ignore[attr-defined]
        seen = {"node": dict(versions)}
        meta = dict(metadata or {"source": "loop", "step": len(self.records)})
        cp = checkpoint(values, versions, seen=seen, **({"ts": ts} if ts else {}))
        record = Record(thread, ns, cp["id"], parent, values, versions, seen, stored_metadata(meta), cp["ts"], meta)
        return record, cp, {c: versions[c] for c in changed}

    def put(self, check: Check, t: Target, h: Handle, thread: str, ns: str, parent: str | None,
            changed: Mapping[str, Any], metadata: Mapping[str, Any] | None = None, *, ts: str | None = None,
            api: str = "", what: str = "") -> Record | None:
        """Put a checkpoint (see :meth:`prepare`) and remember it; ``None`` if the saver raised."""
        record, cp, new_versions = self.prepare(h, thread, ns, parent, changed, metadata, ts)
        done = check.call(thread, f"put(){what} through the {h.label}",
                          h.call("put_checkpoint", thread, ns, parent, cp, record.raw_metadata, new_versions, api))
        if done is RAISED:
            return None
        got = (done or {}).get("configurable", {}) if isinstance(done, dict) else {}
        if got.get("checkpoint_id") != cp["id"] or got.get("thread_id") != thread or \
                got.get("checkpoint_ns", ns) != ns:
            check.add(thread, f"put() through the {h.label} returned a config that does not name the checkpoint it "
                      "stored (thread_id, checkpoint_ns, checkpoint_id)",
                      {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cp["id"]}, got)
        self.records[cp["id"]] = record
        return record

    def write(self, check: Check, h: Handle, t: Target, record: Record, writes: Sequence[tuple[str, Any]],
              task_id: str, task_path: str = "", api: str = "") -> bool:
        """``put_writes`` to ``record``, remembered as the protocol keeps them: a regular
        write once per (task_id, idx), a special channel's overwritten."""
        done = check.call(record.thread, f"put_writes() through the {h.label}",
                          h.call("put_writes", record.thread, record.ns, record.id, list(writes), task_id,
                                 task_path, api))
        if done is RAISED:
            return False
        self.remember(record, writes, task_id, task_path)
        return True

    @staticmethod
    def remember(record: Record, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        special = langgraph().WRITES_IDX_MAP
        for idx, (channel, value) in enumerate(writes):
            key = (task_path, task_id, special.get(channel, idx))
            if key[2] >= 0 and any(k[1:] == key[1:] for k in record.writes):
                continue
            for k in [k for k in record.writes if k[1:] == key[1:]]:
                del record.writes[k]
            record.writes[key] = [task_id, channel, value]

    def of(self, thread: str, ns: str | None = None) -> list[Record]:
        """The thread's checkpoints (in ``ns``, or every namespace), newest first."""
        return sorted((r for r in self.records.values() if r.thread == thread and ns in (None, r.ns)),
                      key=lambda r: r.id, reverse=True)


def read(check: Check, h: Handle, thread: str, ns: str, checkpoint_id: str | None = None, api: str = "") -> Any:
    what = f"get_tuple({'latest' if checkpoint_id is None else 'by id'}) through the {h.label}"
    return check.call(thread, what, h.call("get_checkpoint", thread, ns, checkpoint_id, api))


def ids_of(found: object) -> list[object]:
    return [x.get("id") if isinstance(x, dict) else x for x in found] if isinstance(found, list) else [found]


def tuple_difference(want: Record, got: object, writes: bool = True, parent_gone: bool = False) -> str | None:
    """What differs between a read checkpoint tuple and ``want``; ``None`` if nothing.

    :param parent_gone: its parent was deleted (``prune``): no parent is right too."""
    if got is None:
        return "the checkpoint is missing (None came back)"
    assert isinstance(got, dict)
    if (got["thread"], got["ns"] or "", got["id"]) != (want.thread, want.ns, want.id):
        return (f"the tuple's config names thread {got['thread']!r}, namespace {got['ns']!r}, checkpoint "
                f"{got['id']!r}, not {want.thread!r}, {want.ns!r}, {want.id!r}")
    cp = got["checkpoint"] if isinstance(got["checkpoint"], dict) else {}
    parent = (got["parent"] or {}).get("checkpoint_id")
    if parent != want.parent and not (parent_gone and parent is None):
        latest = "the thread's newest checkpoint before it" if parent is not None else "nothing"
        return (f"parent_config names {parent!r}, not {want.parent!r} (the checkpoint_id of the config put() was "
                f"given); it names {latest}")
    for what, sent, back in (("channel_values", want.values, cp.get("channel_values", MISSING)),
                             ("channel_versions", want.versions, cp.get("channel_versions", MISSING)),
                             ("versions_seen", want.seen, cp.get("versions_seen", MISSING)),
                             ("ts", want.ts, cp.get("ts", MISSING)),
                             ("id", want.id, cp.get("id", MISSING))):
        found = _difference(what, sent, back)
        if found:
            return found
    meta = got["metadata"]
    if not isinstance(meta, dict):
        return f"metadata came back as {type(meta).__name__}, not a dict"
    for key, value in want.metadata.items():
        back = meta.get(key, MISSING)
        # A NUL kept in a top-level string is no failure: the base class strips it, a saver need not.
        if first_difference(value, back) is not None and first_difference(want.raw_metadata.get(key), back) is not None:
            return _difference(f"metadata.{key}", value, back)
    if writes:
        return _writes_difference(want, got["writes"])
    return None


def _writes_difference(want: Record, got: Sequence[Any]) -> str | None:
    expected = want.expected_writes()
    if [list(w) for w in got] == expected and first_difference(expected, [list(w) for w in got]) is None:
        return None
    keys = [(w[0], w[1]) for w in expected]
    back = [(w[0], w[1]) if isinstance(w, (list, tuple)) and len(w) == 3 else w for w in got]
    if sorted(map(repr, keys)) == sorted(map(repr, back)) and keys != back:
        return (f"pending writes came back out of (task_path, task_id, idx) order: sent order {keys}, got {back}")
    if len(back) > len(keys) and all(k in back for k in keys):
        doubled = [k for k in back if back.count(k) > keys.count(k)]
        specials = set(langgraph().WRITES_IDX_MAP)
        if doubled and all(c in specials for _, c in doubled):
            return (f"a special channel's write ({doubled[0][1]!r}) came back {back.count(doubled[0])} times: "
                    "WRITES_IDX_MAP's channels overwrite (one per task), not append")
        return (f"pending writes duplicated: {doubled[:3]} came back more than once (a write is idempotent per "
                "(task_id, idx): a retried put_writes must not add it again)")
    lost = [k for k in keys if k not in back]
    if lost:
        return f"{len(lost)} pending write(s) lost of {len(keys)}: {lost[:3]}"
    extra = [k for k in back if k not in keys]
    if extra:
        return f"{len(extra)} pending write(s) that were never put to this checkpoint came back: {extra[:3]}"
    found = _difference("pending_writes", expected, [list(w) for w in got])
    return found or "pending writes differ"


def expect_tuple(check: Check, want: Record, got: object, what: str = "", writes: bool = True,
                 parent_gone: bool = False) -> bool:
    """Record a violation unless ``got`` is ``want``'s tuple, exactly."""
    if got is RAISED:
        return False
    _LAST.clear()
    found = tuple_difference(want, got, writes, parent_gone)
    if found:
        shown = _LAST[0] if _LAST else (_shown(want), _got_shown(got))
        check.add(want.thread, what + found, *shown)
        return False
    return True


def _shown(want: Record) -> dict[str, Any]:
    return {"id": want.id, "ns": want.ns, "parent": want.parent, "values": want.values,
            "writes": want.expected_writes()}


def _got_shown(got: object) -> object:
    if not isinstance(got, dict):
        return got
    cp = got.get("checkpoint") or {}
    return {"id": got.get("id"), "ns": got.get("ns"), "parent": (got.get("parent") or {}).get("checkpoint_id"),
            "values": cp.get("channel_values") if isinstance(cp, dict) else cp, "writes": got.get("writes")}
