"""LangGraph checkpointers under concurrency: parallel tasks' ``put_writes`` to one
checkpoint (the parallel-branches shape of a graph), two handles putting to one thread,
a delete racing a put, first calls of several handles on a fresh backend (``setup()``
racing), writes from several processes, and two handles seeing each other at once.

Real bugs behind these clauses: a third-party file checkpointer whose ``put_writes`` is
a load-update-save of one file, losing parallel tasks' writes (found in review upstream);
savers that create their tables on first use without a lock.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from storetest._engine import races
from storetest._engine.backends import fresh_fixtures, open_handles, run_in_processes, shared_connections
from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Handle, Target
from storetest.clauses._checkpoint_support import NEEDS, Record, Sent, expect_tuple, ids_of, read
from storetest.clauses._registry import clause

#: Tasks whose writes race to one checkpoint in each round.
TASKS = 5


def _writes_of(k: int, round_: int) -> list[tuple[str, Any]]:
    return [("branch", f"task {k} of round {round_}"), ("count", k), ("blob", bytes([k, 0, round_ % 256]))]


@clause(needs=NEEDS, races=True)
def parallel_put_writes_lose_nothing(t: Target) -> None:
    """Five tasks' ``put_writes`` to one checkpoint at once (a graph's parallel branches
    in one super-step), through every handle, each round: every write of every task
    comes back, once, in ``(task_path, task_id, idx)`` order.

    Catches a ``put_writes`` that loads the checkpoint's writes, adds its own and saves
    them back (a file, a JSON column, one Redis key), so one task's writes overwrite
    another's; a per-process lock on a shared backend.
    """
    with checking(parallel_put_writes_lose_nothing, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            t.tick()
            if not _parallel_round(t, check, round_):
                return


def _parallel_round(t: Target, check: Check, round_: int) -> bool:
    handles = t.handles()
    sent = Sent()
    thread = t.new_session("cp-parallel")
    record = sent.put(check, t, t.store, thread, "", None, {"messages": ["start"]})
    if record is None:
        return False

    def task(k: int, h: Handle) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            return await h.call("put_writes", thread, "", record.id, _writes_of(k, round_), f"task-{k}",
                                f"~__pregel_pull, node_{k}")
        return run

    outcome = t.race([_caught(task(k, handles[k % len(handles)])) for k in range(TASKS)])
    for k, error in enumerate(outcome):
        if error is None:
            Sent.remember(record, _writes_of(k, round_), f"task-{k}", f"~__pregel_pull, node_{k}")
        else:
            check.add(thread, f"put_writes() of task {k}, racing {TASKS - 1} others, raised {error}")
    return expect_tuple(check, record, read(check, t.store, thread, "", record.id),
                        f"after {TASKS} tasks' put_writes at once (round {round_}): ")


def _caught(call: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[str | None]]:
    async def run() -> str | None:
        try:
            await call()
        except Exception as exc:
            return describe_exception(exc)
        return None
    return run


@clause(needs=NEEDS, replica=True, races=True)
def checkpoint_handles_putting_to_one_thread_lose_nothing(t: Target) -> None:
    """Two handles on one backend putting checkpoints to one thread at once (each its
    own fork off the same parent, with its own pending writes) both land: each
    checkpoint with its values, parent and writes, seen through either handle, ``list``
    holding both newest first.

    Catches a thread's checkpoints kept as one document rewritten from a stale copy, a
    "latest" pointer updated by read-then-write, a per-handle cache.
    """
    assert t.replica is not None
    with checking(checkpoint_handles_putting_to_one_thread_lose_nothing, t.run) as check:
        for _ in range(t.profile.race_rounds):
            t.tick()
            if not _two_handles_round(t, check):
                return


def _two_handles_round(t: Target, check: Check) -> bool:
    sent = Sent()
    thread = t.new_session("cp-two")
    root = sent.put(check, t, t.store, thread, "", None, {"v": "root"})
    if root is None:
        return False
    prepared = [sent.prepare(h, thread, "", root.id, {"v": f"from the {h.label}", "k": k})
                for k, h in enumerate(t.handles())]

    def putter(h: Handle, record: Record, cp: dict[str, Any], versions: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            await h.call("put_checkpoint", thread, "", root.id, cp, record.raw_metadata, versions)
            await h.call("put_writes", thread, "", record.id, [("w", h.label)], "task", "")
        return run

    outcome = t.race([_caught(putter(h, *p)) for h, p in zip(t.handles(), prepared, strict=True)])
    for (record, _, _), error, h in zip(prepared, outcome, t.handles(), strict=True):
        if error is not None:
            check.add(thread, f"a put through the {h.label}, racing the other handle's, raised {error}")
            continue
        sent.records[record.id] = record
        Sent.remember(record, [("w", h.label)], "task", "")
    for h in t.handles():
        for record in sent.of(thread):
            if not expect_tuple(check, record, read(check, h, thread, "", record.id),
                                f"read through the {h.label} after both handles put at once: "):
                return False
        got = check.call(thread, f"list() through the {h.label}", h.call("list_checkpoints", thread, ""))
        if got is not RAISED and ids_of(got) != [r.id for r in sent.of(thread)]:
            check.add(thread, f"list() through the {h.label} after both handles put at once",
                      [r.id for r in sent.of(thread)], ids_of(got))
            return False
    return not check.violations


@clause(needs=NEEDS, replica=True)
def checkpoint_handles_see_each_other_at_once(t: Target) -> None:
    """What one handle puts, writes or deletes, the other handle on the same backend
    sees at its next call: checkpoints put alternately through each, chained, read and
    listed through the other; a delete through one seen through the other.

    Catches a per-handle cache (one its own writes keep right too), a write buffered
    until close, an in-memory saver whose second instance is a second backend.
    """
    assert t.replica is not None
    with checking(checkpoint_handles_see_each_other_at_once, t.run) as check:
        sent = Sent()
        thread = t.new_session("cp-replicas")
        parent = None
        handles = t.handles()
        for i in range(4):
            h, other = handles[i % 2], handles[(i + 1) % 2]
            record = sent.put(check, t, h, thread, "", parent, {"v": f"{i} through the {h.label}"})
            if record is None:
                return
            sent.write(check, h, t, record, [("w", i)], f"task-{i}")
            # The putter reads its own latest too, so a cache it keeps right on its own
            # writes holds this one when the other handle puts the next.
            if not expect_tuple(check, record, read(check, h, thread, "", None),
                                f"put through the {h.label}, the latest read through the same handle: "):
                return
            if not expect_tuple(check, record, read(check, other, thread, "", None),
                                f"put through the {h.label}, the latest read through the {other.label}: "):
                return
            parent = record.id
        got = check.call(thread, "list() through the replica", t.replica.call("list_checkpoints", thread, ""))
        if got is not RAISED and ids_of(got) != [r.id for r in sent.of(thread)]:
            check.add(thread, "list() through the replica does not hold what the factory's handle put",
                      [r.id for r in sent.of(thread)], ids_of(got))
        if check.call(thread, "delete_thread() through the replica", t.replica.call("delete_thread", thread)) \
                is not RAISED:
            got = check.call(thread, "get_tuple() through the factory's handle after the replica's delete",
                             t.store.call("get_checkpoint", thread, "", None))
            if got not in (RAISED, None):
                check.add(thread, "a thread deleted through the replica is still there through the factory's handle",
                          None, ids_of([got]))


@clause(needs=NEEDS, races=True)
def delete_racing_put_leaves_no_part(t: Target) -> None:
    """A ``delete_thread`` racing a ``put`` (and its ``put_writes``) to the same thread
    leaves either nothing or the new checkpoint whole (its values, its writes), never a
    checkpoint whose values or writes were deleted under it; a thread whose id extends
    the deleted one keeps everything.

    Catches a delete that removes checkpoints, then blobs, then writes in separate
    statements while a put inserts them in another order; a delete by prefix.
    """
    with checking(delete_racing_put_leaves_no_part, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            t.tick()
            if not _delete_round(t, check, round_):
                return


def _delete_round(t: Target, check: Check, round_: int) -> bool:
    sent = Sent()
    thread = t.new_session("cp-delrace")
    neighbour = f"{thread}:1"
    old = sent.put(check, t, t.store, thread, "", None, {"v": "old", "blob": {"nested": [1]}})
    kept = sent.put(check, t, t.store, neighbour, "", None, {"v": "neighbour"})
    if old is None or kept is None:
        return False
    # Every channel at a new version: the new checkpoint needs nothing the delete may take.
    record, cp, versions = sent.prepare(t.store, thread, "", old.id,
                                        {"v": "new", "blob": {"nested": [2]}, "more": b"\x00new"})

    async def put() -> Any:
        await t.store.call("put_checkpoint", thread, "", old.id, cp, record.raw_metadata, versions)
        await t.store.call("put_writes", thread, "", record.id, [("w", "new")], "task", "")

    async def delete() -> Any:
        await t.store.call("delete_thread", thread)

    calls = [_caught(put), _caught(delete)]
    for error in t.race(calls if round_ % 2 else calls[::-1]):
        if error is not None:
            check.add(thread, f"a delete_thread() racing a put() raised {error}")
    got = read(check, t.store, thread, "", record.id)
    if got not in (RAISED, None) and isinstance(got, dict):
        cp_got = got.get("checkpoint") or {}
        values = cp_got.get("channel_values") if isinstance(cp_got, dict) else None
        if values != record.values:
            check.add(thread, "after a delete_thread() racing a put(), the new checkpoint is there without all of its "
                      "channel values: the delete removed them under it", record.values, values)
            return False
        if got.get("writes") != [["task", "w", "new"]]:
            check.add(thread, "after a delete_thread() racing a put() and its put_writes(), the new checkpoint is "
                      "there without its writes: the delete removed them under it (checkpoints, blobs and writes "
                      "deleted in separate steps)", [["task", "w", "new"]], got.get("writes"))
            return False
    expect_tuple(check, kept, read(check, t.store, neighbour, "", kept.id),
                 f"thread {neighbour!r}, beside the deleted one: ")
    return not check.violations


@clause(needs=NEEDS, races=True)
def checkpoint_first_calls_on_a_fresh_backend_succeed(t: Target) -> None:
    """Four savers opened on a fresh backend (a new database or directory each round),
    each running ``setup()`` and its first ``put`` and ``put_writes`` at once, all
    succeed, and each one's checkpoint is there afterwards.

    Catches tables created on first use without ``IF NOT EXISTS`` or a lock, migrations
    numbered by check-then-insert ("duplicate key value violates unique constraint"),
    ``setup()`` that is not safe to run twice at once.
    """
    with checking(checkpoint_first_calls_on_a_fresh_backend_succeed, t.run) as check:
        for round_ in range(max(3, t.profile.race_rounds // 2)):
            t.tick()
            with fresh_fixtures(t.fixtures) as fixtures:
                errors = t.run(_fresh_round(t, fixtures, round_))
            for error in errors[:3]:
                check.add(f"fresh backend #{round_}", f"a first call on a fresh backend raised {error}: make setup() "
                          "and table creation idempotent under concurrency (IF NOT EXISTS, a lock)")
            if check.violations:
                return


async def _fresh_round(t: Target, fixtures: dict[str, Any], round_: int) -> list[str]:
    errors: list[str] = []
    sent = Sent()
    threads = [t.new_session(f"cp-fresh{round_}-{k}") for k in range(4)]

    async with open_handles(t, fixtures, 4) as handles:
        prepared = [sent.prepare(h, threads[k], "", None, {"v": f"first {k}"}) for k, h in enumerate(handles)]

        def first(h: Handle, k: int) -> Callable[[], Awaitable[None]]:
            record, cp, versions = prepared[k]

            async def run() -> None:
                try:
                    await h.call("put_checkpoint", threads[k], "", None, cp, record.raw_metadata, versions)
                    await h.call("put_writes", threads[k], "", record.id, [("w", k)], "task", "")
                except Exception as exc:
                    errors.append(f"through {h.label}: {describe_exception(exc)}")
            return run

        await races.together([first(h, k) for k, h in enumerate(handles)], threads=False)
        if errors:
            return errors
        for k, (record, _, _) in enumerate(prepared):
            Sent.remember(record, [("w", k)], "task", "")
            try:
                got = await handles[(k + 1) % 4].call("get_checkpoint", threads[k], "", record.id)
            except Exception as exc:
                errors.append(f"get_tuple() after the first calls: {describe_exception(exc)}")
                continue
            check = Check(checkpoint_first_calls_on_a_fresh_backend_succeed)
            if not expect_tuple(check, record, got):
                errors.append(f"thread {threads[k]!r}: {check.violations[0].diagnosis}")
    return errors


def process_writer(t: Target, w: int, thread: str, checkpoint_id: str, seconds: float) -> tuple[list[int], list[str]]:
    """In a child process, for ``seconds`` (at least 3 rounds, at most 200): ``put_writes``
    of task ``p<w>-<n>`` to one checkpoint, round after round; the rounds it finished,
    and what it raised."""
    done: list[int] = []
    errors: list[str] = []
    started = time.monotonic()
    for n in range(200):
        if n >= 3 and time.monotonic() - started > seconds:
            break
        try:
            t.run(t.store.call("put_writes", thread, "", checkpoint_id, [("x", f"p{w}-{n}"), ("y", n)],
                               f"p{w}-{n}", f"~__pregel_pull, p{w}"))
        except Exception as exc:
            errors.append(f"process {w}: {describe_exception(exc)}")
            break
        done.append(n)
    return done, errors


@clause(needs=NEEDS, races=True, processes=True)
def put_writes_from_processes_lose_nothing(t: Target) -> None:
    """Three processes (forked from the run's fork server, or spawned), each on its own
    handle, putting tasks' writes to one checkpoint at once for a second: every write of
    every task comes back once, in ``(task_path, task_id, idx)`` order.

    Catches a lock that holds within one process only (``asyncio.Lock``,
    ``threading.Lock``) around a load-update-save of a file or a key; a SQLite saver
    without a busy timeout.
    """
    with checking(put_writes_from_processes_lose_nothing, t.run) as check:
        t.tick()
        sent = Sent()
        thread = t.new_session("cp-processes")
        record = sent.put(check, t, t.store, thread, "", None, {"v": "shared"})
        if record is None:
            return
        results = run_in_processes(t, process_writer, [(w, thread, record.id, 1.0) for w in range(3)])
        for _, errors in results:
            for error in errors[:1]:
                check.add(thread, f"a call in a child process raised: {error}{shared_connections(t.factory)}")
        for w, (done, _) in enumerate(results):
            for n in done:
                Sent.remember(record, [("x", f"p{w}-{n}"), ("y", n)], f"p{w}-{n}", f"~__pregel_pull, p{w}")
        expect_tuple(check, record, read(check, t.store, thread, "", record.id),
                     f"after writes from {len(results)} processes: ")

