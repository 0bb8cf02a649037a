"""A LangGraph checkpointer's optional methods, each judged where the saver claims it
(overrides the base class's, which raises ``NotImplementedError``), as
``langgraph-checkpoint`` 4.3.2's ``BaseCheckpointSaver`` defines them: ``copy_thread``
copies every checkpoint and write of one thread to another (the complete parent chain,
its docstring insists), ``prune`` keeps each namespace's latest checkpoint
(``keep_latest``) or deletes the threads (``delete``), ``delete_for_runs`` deletes the
checkpoints of the given runs (metadata ``run_id``) with their writes.

Real bugs behind these clauses: a copy of the head checkpoint only (the base class
warns of it: the copy cannot rebuild its state), a ``keep_latest`` that deletes the
blobs of the checkpoints it drops although the kept one still reads them (values
carried from an older step; ``AsyncPostgresSaver.prune`` keeps what the kept
checkpoint references for this), a delete of one namespace only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from storetest._engine.failures import RAISED, Check, checking
from storetest._engine.harness import Target
from storetest.clauses._checkpoint_support import NEEDS, Record, Sent, expect_tuple, ids_of, read
from storetest.clauses._registry import clause
from storetest.clauses.checkpoints import _expect_ids


def _thread(check: Check, t: Target, sent: Sent, thread: str, *, runs: tuple[str, ...] = ("",)) -> list[Record]:
    """A small tree in each of two namespaces: in ``""`` a root, a child, a fork of the
    root and the child's child (the latest), a channel set at the root only (carried,
    so the latest reads the root's blob); in ``"inner"`` a chain of two. Each has a
    regular write, the latest an ``__interrupt__`` too. Metadata ``run_id`` cycles
    through ``runs``."""
    out: list[Record] = []
    made: dict[str, Record] = {}
    for i, (name, ns, parent) in enumerate((("root", "", ""), ("a1", "", "root"), ("b1", "", "root"),
                                             ("a2", "", "a1"), ("i1", "inner", ""), ("i2", "inner", "i1"))):
        changed: dict[str, Any] = {"step": f"{name} of {thread}"}
        if not parent:
            changed["carried"] = {"set": "at the root only", "bytes": b"\x00kept"}
        run = runs[i % len(runs)]
        meta = {"source": "loop", "step": i, **({"run_id": run} if run else {})}
        record = sent.put(check, t, t.store, thread, ns, made[parent].id if parent else None, changed, meta)
        if record is None:
            return []
        made[name] = record
        out.append(record)
        sent.write(check, t.store, t, record, [("w", f"{name} of {thread}")], f"task-{name}", f"path {name}")
    for record in (made["a2"], made["i2"]):
        sent.write(check, t.store, t, record, [("__interrupt__", {"value": "asked"})], "task-i", "path i")
    return out


def _unchanged(check: Check, t: Target, records: list[Record], what: str) -> bool:
    for record in records:
        if not expect_tuple(check, record, read(check, t.store, record.thread, record.ns, record.id),
                            f"{what}, thread {record.thread!r}: "):
            return False
    return True


@clause(needs=(*NEEDS, "copy_thread"))
def copy_thread_copies_every_checkpoint_and_write(t: Target) -> None:
    """``copy_thread(source, target)`` gives the target every checkpoint of the source
    in every namespace (a fork included), by the same ids, each with its values,
    metadata, parent and pending writes, listed in the same order; the source and a
    thread whose id extends it are unchanged; a put to the copy leaves the source as it
    was; a copy of a thread never put leaves its target empty.

    Catches a copy of each namespace's latest checkpoint only (the base class warns:
    the copy cannot rebuild its state), of the default namespace only, without the
    pending writes, or a target that shares the source's rows.
    """
    with checking(copy_thread_copies_every_checkpoint_and_write, t.run) as check:
        sent = Sent()
        source = t.new_session("cp-copy")
        records = _thread(check, t, sent, source)
        neighbour = _thread(check, t, sent, f"{source}-1")
        if not records or not neighbour:
            return
        target = f"{source}:copy"
        if check.call(source, "copy_thread()", t.store.call("copy_thread", source, target)) is RAISED:
            return
        copies = [dataclasses.replace(r, thread=target, writes=dict(r.writes)) for r in records]
        for copy, record in zip(copies, records, strict=True):
            if not expect_tuple(check, copy, read(check, t.store, target, copy.ns, copy.id),
                                f"the copy of checkpoint {record.id} (namespace {record.ns!r}): "):
                return
        for ns in ("", "inner"):
            got = check.call(target, f"list() of the copy, namespace {ns!r}",
                             t.store.call("list_checkpoints", target, ns))
            _expect_ids(check, target, f"list() of the copy, namespace {ns!r}",
                        [r for r in sent.of(source, ns)], got)
        if check.violations or not _unchanged(check, t, records + neighbour, "after copy_thread()"):
            return
        latest = next(c for c in copies if c.ns == "" and c.id == sent.of(source, "")[0].id)
        more = sent.put(check, t, t.store, target, "", latest.id, {"step": "put to the copy"})
        if more is None:
            return
        got = check.call(source, "list() of the source", t.store.call("list_checkpoints", source, ""))
        _expect_ids(check, source, "list() of the source after a put to its copy", sent.of(source, ""), got)
        never, empty = t.new_session("cp-copy-never"), t.new_session("cp-copy-empty")
        try:  # it may raise (LangGraph's own suite lets it); it must not make checkpoints
            t.run(t.store.call("copy_thread", never, empty))
        except Exception:
            pass
        got = check.call(empty, "list()", t.store.call("list_checkpoints", empty, None))
        if got not in (RAISED, []):
            check.add(empty, "copy_thread() of a thread never put gave its target checkpoints", [], ids_of(got))


@clause(needs=(*NEEDS, "prune"))
def prune_keeps_each_namespaces_latest_whole(t: Target) -> None:
    """``prune(threads, strategy="keep_latest")`` leaves each namespace of each thread
    its latest checkpoint alone, whole: its values (those carried from the root too),
    metadata and pending writes (its parent may be dropped with the rest); every older
    checkpoint is gone; threads not named, their ids extending or prefixing a pruned
    one, keep everything. ``strategy="delete"`` empties the threads named and only
    them; an empty list changes nothing.

    Catches a ``keep_latest`` that deletes the blobs of the checkpoints it drops though
    the kept one still reads them, one that keeps the oldest or the default namespace's
    only, a prune by id prefix.
    """
    with checking(prune_keeps_each_namespaces_latest_whole, t.run) as check:
        sent = Sent()
        x = t.new_session("cp-prune")
        pruned = [x, f"{x}:2"]
        kept = [f"{x}-1", x[:-1]]
        for thread in pruned + kept:
            if not _thread(check, t, sent, thread):
                return
        if check.call(x, "prune([]) of no thread", t.store.call("prune", [], "keep_latest")) is RAISED:
            return
        if check.call(x, "prune(keep_latest)", t.store.call("prune", pruned, "keep_latest")) is RAISED:
            return
        for thread in pruned:
            for ns in ("", "inner"):
                latest = sent.of(thread, ns)[0]
                got = check.call(thread, f"list() after prune(keep_latest), namespace {ns!r}",
                                 t.store.call("list_checkpoints", thread, ns))
                if got is not RAISED and ids_of(got) != [latest.id]:
                    left = [i for i in ids_of(got) if i != latest.id]
                    check.add(thread, f"after prune(keep_latest), namespace {ns!r} of thread {thread!r} holds "
                              + (f"{len(left)} checkpoint(s) besides its latest" if latest.id in ids_of(got)
                                 else "no longer its latest checkpoint"), [latest.id], ids_of(got))
                    return
                if not expect_tuple(check, latest, read(check, t.store, thread, ns), f"the latest checkpoint, kept "
                                    f"by prune(keep_latest), namespace {ns!r}: ", parent_gone=True):
                    return
        if not _unchanged(check, t, [r for k in kept for r in sent.of(k)], "a thread prune() was not given"):
            return
        if check.call(x, "prune(delete)", t.store.call("prune", [x], "delete")) is RAISED:
            return
        for ns in ("", "inner"):
            got = check.call(x, "list() after prune(delete)", t.store.call("list_checkpoints", x, ns))
            if got not in (RAISED, []):
                check.add(x, f"prune(strategy='delete') left {len(got)} checkpoint(s) in namespace {ns!r}", [],
                          ids_of(got))
        other = sent.of(pruned[1], "")[0]
        expect_tuple(check, other, read(check, t.store, other.thread, "", other.id),
                     "a thread pruned before, not named by prune(delete): ", parent_gone=True)
        _unchanged(check, t, [r for k in kept for r in sent.of(k)], "a thread prune(delete) was not given")


@clause(needs=(*NEEDS, "delete_for_runs"))
def delete_for_runs_removes_those_runs_only(t: Target) -> None:
    """``delete_for_runs(run_ids)`` removes every checkpoint whose metadata ``run_id``
    is one of them, in every thread and namespace, with its pending writes; the
    checkpoints of other runs (one whose id extends a deleted one's among them) stay
    whole; ``list`` gives the rest newest first; an empty list or an unknown run changes
    nothing.

    Catches a delete in the default namespace only, a run id matched by prefix, writes
    or checkpoints of other runs deleted with them.
    """
    with checking(delete_for_runs_removes_those_runs_only, t.run) as check:
        sent = Sent()
        x = t.new_session("cp-runs")
        a, b = t.new_session("run-a"), t.new_session("run-b")
        runs = (a, b, f"{a}0", "")
        threads = [x, f"{x}-1"]
        for thread in threads:
            if not _thread(check, t, sent, thread, runs=runs):
                return
        for what, ids in (("of no run", []), ("of a run never put", [t.new_session("run-never")]),
                          ("", [a, b])):
            if check.call(x, f"delete_for_runs() {what}", t.store.call("delete_for_runs", ids)) is RAISED:
                return
        gone = {r.id for r in sent.records.values() if r.raw_metadata.get("run_id") in (a, b)}
        for thread in threads:
            for ns in ("", "inner"):
                left = [r for r in sent.of(thread, ns) if r.id not in gone]
                got = check.call(thread, "list()", t.store.call("list_checkpoints", thread, ns))
                stayed = [i for i in ids_of(got) if i in gone] if got is not RAISED else []
                if stayed:
                    record = sent.records[str(stayed[0])]
                    check.add(thread, f"after delete_for_runs(), checkpoint {record.id} of run "
                              f"{record.raw_metadata.get('run_id')!r} is still listed in thread {thread!r}, "
                              f"namespace {ns!r}", [r.id for r in left], ids_of(got))
                    return
                _expect_ids(check, thread, f"list() after delete_for_runs(), namespace {ns!r}", left, got)
                for record in left:
                    if not expect_tuple(check, record, read(check, t.store, thread, ns, record.id),
                                        f"run {record.raw_metadata.get('run_id')!r}, not deleted: ",
                                        parent_gone=record.parent in gone):
                        return
                for record in sent.of(thread, ns):
                    if record.id in gone:
                        got = read(check, t.store, thread, ns, record.id)
                        if got not in (RAISED, None):
                            check.add(thread, f"after delete_for_runs(), checkpoint {record.id} of a deleted run "
                                      f"is still there in namespace {ns!r}", None, ids_of([got]))
                            return
