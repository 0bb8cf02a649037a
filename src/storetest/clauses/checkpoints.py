"""LangGraph checkpointers (:mod:`storetest.bindings.langgraph`, the ``checkpoints``
capability): a checkpoint is an entry with a parent pointer, a thread a tree of them.
What is put comes back exactly (channel values of every ``serde`` kind, versions,
metadata); ``list`` is newest first and honours every filter, ``before`` and ``limit``;
threads and namespaces never mix, whatever their ids hold; each checkpoint's parent is
the id its ``put`` was given; pending writes are idempotent per ``(task_id, idx)``, the
special channels overwrite, and they come back in ``(task_path, task_id, idx)`` order;
``delete_thread`` removes that thread and nothing else; the sync and async APIs agree.

Real bugs behind these clauses: ``AsyncPostgresSaver`` refusing a
string channel value with a NUL (primitives kept inline in a ``jsonb`` column, LangGraph
issue 1878); ``langgraph-checkpoint-plainredis`` keying ``prefix:idx:{thread}:{ns}``, so
thread ``x:b`` / namespace ``c`` and thread ``x`` / namespace ``b:c`` list each other's
checkpoints; ``langgraph-checkpoint-lmdb`` ignoring the metadata filter of ``list``.
"""

from __future__ import annotations

from typing import Any, Final

from storetest._engine import inputs
from storetest._engine.failures import RAISED, Check, checking
from storetest._engine.harness import Target
from storetest.clauses._checkpoint_support import NEEDS, Record, Sent, expect_tuple, ids_of, read
from storetest.clauses._registry import clause

#: A channel value of every kind LangGraph's serde keeps (``dumps_typed``), NUL aside.
_KINDS: Final[dict[str, Any]] = {
    "none": None, "bytes": b"\x00\x01 bytes \xff\x00", "empty bytes": b"", "bytearray": bytearray(b"\x00ba\xff"),
    "int": 2**53 + 1, "negative": -7, "float": 1.0, "fraction": 0.1, "true": True, "false": False, "empty": "",
    "astral": "\U0001f642\U0001d11e\U00020000\U0010fffd", "list": [1, 1.0, True, None, "1", [], {}],
    "nested": {"deep": {"a": {"b": {"c": ["d", {"e": 2**63 - 1}]}}}, "bytes inside": b"\x00x", "text": "ß"},
    "messages": [{"role": "user", "content": "weather in Zürich?"}, {"role": "assistant", "content": "",
                                                                      "tool_calls": [{"id": "c1", "args": {}}]}],
}


def channel_values() -> dict[str, Any]:
    """Every value the round trip sends, by channel: each serde kind, each piece of each
    character family of the input-space model (NUL removed: ``channel_values_keep_nul``
    has it), and the model's size ladder to 64 KiB + 1 in bytes and in characters."""
    out = dict(_KINDS)
    for i, piece in enumerate(inputs.family_values()):
        out[f"family {i}"] = piece.replace("\x00", "")
    spec = inputs.FieldSpec("checkpoints", "channel value")
    for i, value in enumerate(inputs.size_values(spec)):
        out[f"size {i}"] = value
    out["1 MiB text"] = "t" * (2**20 - 1) + "é"
    out["1 MiB bytes"] = bytes(range(256)) * 4096
    return out


def metadata(step: int, **extra: Any) -> dict[str, Any]:
    return {"source": "loop", "step": step, "parents": {}, "custom": "日本語 👍🏽 e\u0301", "big": 2**53 + 1,
            "ratio": 1.5, "flag": True, "nothing": None, "nested": {"a": [1, "b", {"c": None}]}, **extra}


@clause(needs=NEEDS)
def checkpoints_round_trip_exactly(t: Target) -> None:
    """Every checkpoint put comes back from ``get_tuple`` (by id and as the latest) and
    from ``list`` exactly, type for type: channel values of every kind the ``serde``
    keeps (``None``, ``bytes`` with NUL bytes, ``bytearray``, integers past 2^53, ``1.0``
    beside ``1``, nested structures, every character family, astral characters, the
    size ladder to 64 KiB + 1 and 1 MiB values), carried from the parent when their
    version did not change; ``channel_versions``, ``versions_seen``, ``ts``, its id, its
    parent and custom metadata (NUL in a top-level string may be stripped, as the base
    class does).

    Catches bytes decoded as text, a ``bytearray`` kept as ``bytes``, values cut at a
    column's width, a channel value read from the newest blob instead of its version's.
    """
    values = channel_values()
    names = list(values)
    groups = [names[i::3] for i in range(3)]
    with checking(checkpoints_round_trip_exactly, t.run) as check:
        sent = Sent()
        thread = t.new_session("cp-rt")
        parent: str | None = None
        for step, group in enumerate(groups):
            # "counter" changes at every step: a read gives its version's value, not the newest one's.
            changed = {name: values[name] for name in group} | {"counter": step}
            record = sent.put(check, t, t.store, thread, "", parent, changed,
                              metadata(step, nul="meta\x00data", step_name=f"s{step}"))
            if record is None:
                return
            parent = record.id
        records = sent.of(thread)
        for record in records:
            if not expect_tuple(check, record, read(check, t.store, thread, "", record.id), "get_tuple by id: "):
                return
        expect_tuple(check, records[0], read(check, t.store, thread, ""), "get_tuple of the latest: ")
        listed = check.call(thread, "list()", t.store.call("list_checkpoints", thread, ""))
        if listed is not RAISED and len(listed) == len(records):
            for want, got in zip(records, listed, strict=True):
                if not expect_tuple(check, want, got, "list(): "):
                    break


@clause(needs=NEEDS)
def checkpoint_values_keep_nul(t: Target) -> None:
    """A NUL character (``\\x00``, valid in a Python string and in msgpack) comes back where
    it was: in a string channel value, in a string inside a nested value, in a pending
    write's value. Each case has its own thread, and the other clauses send no NUL in a
    string value, so a backend refusing NUL fails here only.

    Catches ``AsyncPostgresSaver`` (primitives kept inline in ``jsonb``:
    ``UntranslatableCharacter``, LangGraph issue 1878), a C-string boundary that cuts at
    the NUL, a saver that strips NUL from values as the base class does from metadata.
    """
    cases: dict[str, dict[str, Any]] = {"a string channel value": {"text": "before\x00after"},
             "a string in a nested value": {"nested": {"k": ["a\x00b"]}}}
    with checking(checkpoint_values_keep_nul, t.run) as check:
        sent = Sent()
        for what, changed in cases.items():
            thread = t.new_session("cp-nul")
            record = sent.put(check, t, t.store, thread, "", None, changed, what=f" of a NUL in {what}")
            if record is not None:
                expect_tuple(check, record, read(check, t.store, thread, "", record.id), f"a NUL in {what}: ")
        thread = t.new_session("cp-nul")
        record = sent.put(check, t, t.store, thread, "", None, {"plain": "no NUL here"})
        if record is not None and sent.write(check, t.store, t, record, [("out", "a\x00b")], "task"):
            expect_tuple(check, record, read(check, t.store, thread, "", record.id), "a NUL in a pending write: ")


def _chain(check: Check, t: Target, sent: Sent, thread: str, n: int, ns: str = "") -> list[Record]:
    """``n`` checkpoints in a chain, metadata ``source`` alternating input/loop, ``step``
    the index, ``parity``; timestamps *decreasing* as ids increase (a clock behind)."""
    out: list[Record] = []
    parent = None
    for i in range(n):
        meta = {"source": "input" if i % 2 == 0 else "loop", "step": i, "parity": "even" if i % 2 == 0 else "odd"}
        record = sent.put(check, t, t.store, thread, ns, parent, {"step": i}, meta,
                          ts=f"2026-01-01T00:00:{59 - i:02d}.000000+00:00")
        if record is None:
            break
        out.append(record)
        parent = record.id
    return out


def _expect_ids(check: Check, thread: str, what: str, want: list[Record], got: object, *,
                matching: list[Record] | None = None, before: Record | None = None, limit: int | None = None) -> None:
    """Record a violation unless ``got`` lists exactly ``want``'s checkpoints, in order.

    :param matching: every checkpoint the filter matches (a limit's ``want`` is its head).
    :param before: the checkpoint ``before`` named; :param limit: the limit given."""
    if got is RAISED:
        return
    want_ids, got_ids = [r.id for r in want], ids_of(got)
    if got_ids == want_ids:
        return
    if limit == 0 and got_ids:
        cause = "limit=0 read as no limit (`if limit:` treats 0 like None); list(limit=0) lists nothing"
    elif before is not None and before.id in got_ids:
        cause = "the checkpoint `before` names was listed: before is exclusive (checkpoint_id < before's, not <=)"
    elif sorted(map(str, got_ids)) == sorted(want_ids):
        order = "oldest first" if got_ids == want_ids[::-1] else "in another order"
        cause = (f"listed the checkpoints {order}: list() is newest first (by checkpoint id, which increases; not by "
                 "ts, which a clock behind or a replica's clock does not)")
    elif limit is not None and matching is not None and len(got_ids) < len(want_ids) <= len(matching):
        cause = (f"listed {len(got_ids)} checkpoint(s) where {len(matching)} match and the limit is {limit}: the "
                 "limit was taken before the filter (LIMIT in the query, the filter applied afterwards)")
    elif set(map(str, got_ids)) > set(want_ids):
        cause = f"listed {len(got_ids) - len(want_ids)} checkpoint(s) too many"
    else:
        cause = f"listed {len(got_ids)} checkpoint(s), wanted {len(want_ids)}"
    check.add(thread, f"{what}: {cause}", want_ids, got_ids)


@clause(needs=NEEDS)
def checkpoint_list_filters_before_and_limit(t: Target) -> None:
    """``list`` gives a thread's checkpoints newest first (by id; their ``ts`` runs
    backwards here); with a metadata ``filter`` exactly the matching ones (one key, two
    keys, a match of none); with ``before`` exactly those older than it, for each
    checkpoint; with ``limit`` 0, 1, N and N + 1 the newest that many, the limit taken
    after the filter and ``before``.

    Catches a list ordered by timestamp, a filter ignored (``langgraph-checkpoint-lmdb``
    0.3.1), ``before`` inclusive, a ``LIMIT`` applied before the filter, ``limit=0`` read
    as no limit.
    """
    n = 6
    with checking(checkpoint_list_filters_before_and_limit, t.run) as check:
        sent = Sent()
        thread = t.new_session("cp-list")
        records = _chain(check, t, sent, thread, n)
        if len(records) < n:
            return
        newest = records[::-1]

        def listed(what: str, want: list[Record], flt: Any = None, before: Record | None = None,
                   limit: int | None = None, matching: list[Record] | None = None) -> None:
            got = check.call(thread, f"list({what})", t.store.call("list_checkpoints", thread, "", flt,
                                                                   before and before.id, limit))
            _expect_ids(check, thread, f"list({what})", want, got, matching=matching, before=before, limit=limit)

        listed("", newest)
        for what, flt in (("source='input'", {"source": "input"}), ("step=3", {"step": 3}),
                          ("source='loop', parity='odd'", {"source": "loop", "parity": "odd"}),
                          ("source='loop', parity='even'", {"source": "loop", "parity": "even"})):
            want = [r for r in newest if all(r.metadata.get(k) == v for k, v in flt.items())]
            listed(f"filter {what}", want, flt)
            listed(f"filter {what}, limit 1", want[:1], flt, None, 1, want)
        for i, r in enumerate(records):
            listed(f"before checkpoint {i}", records[:i][::-1], None, r)
        listed("before checkpoint 4, limit 2", records[:4][::-1][:2], None, records[4], 2, records[:4])
        for limit in (0, 1, n, n + 1):
            listed(f"limit {limit}", newest[:limit], None, None, limit)


def separated_ids(prefix: str) -> list[tuple[str, str]]:
    """(thread, namespace) pairs that join to one key under a separator: for each of
    ``: | / . $`` and braces, thread ``x<c>b`` / namespace ``c`` beside thread ``x`` /
    namespace ``b<c>c``; and thread ids that are prefixes of each other (``x``, ``x<c>``,
    ``xy``) in the default namespace."""
    x = f"{prefix}x"
    out: list[tuple[str, str]] = [(x, ""), (f"{x}y", ""), (f"{x}%", ""), (f"{x}_", "")]
    for c in (":", "|", "/", ".", "$", "{", "}", "-", "\\"):
        out += [(f"{x}{c}b", "c"), (x, f"b{c}c"), (f"{x}{c}", ""), (f"{x}{c}b{c}c", "")]
    out += [(x, "ns"), (x, "ns:child"), (x, "ns|child"), (x, "{ns}")]
    return list(dict.fromkeys(out))


@clause(needs=NEEDS)
def checkpoint_threads_and_namespaces_are_isolated(t: Target) -> None:
    """Threads and namespaces never see each other's checkpoints or writes, however their
    ids hold the separators of a composite key (``:`` ``|`` ``/`` ``.`` ``$`` braces,
    ``-``, backslash): thread ``x:b`` in namespace ``c`` beside thread ``x`` in namespace
    ``b:c``, threads ``x``, ``x:``, ``xy``, ``x%`` beside each other; ``list`` of a
    thread and namespace and ``get_tuple`` give each its own.

    Catches keys joined with an unescaped separator (``langgraph-checkpoint-plainredis``
    0.1.0: ``prefix:idx:{thread}:{ns}``), a namespace filter ignored, a ``LIKE`` or prefix
    scan over thread ids.
    """
    with checking(checkpoint_threads_and_namespaces_are_isolated, t.run) as check:
        sent = Sent()
        base = t.new_session("cp-iso")
        places = separated_ids(base)
        mine: dict[tuple[str, str], Record] = {}
        for thread, ns in places:
            record = sent.put(check, t, t.store, thread, ns, None, {"owner": f"{thread}|{ns}"})
            if record is not None:
                sent.write(check, t.store, t, record, [("mark", f"{thread}|{ns}")], "task")
                mine[thread, ns] = record
        for (thread, ns), record in mine.items():
            got = check.call(thread, f"list(namespace {ns!r})", t.store.call("list_checkpoints", thread, ns))
            if got is not RAISED and ids_of(got) != [record.id]:
                others = [f"{r.thread!r}/{r.ns!r}" for r in sent.records.values() if r.id in ids_of(got) and
                          r is not record]
                check.add(thread, f"list() of thread {thread!r}, namespace {ns!r} gave checkpoints of "
                          f"{', '.join(others) or 'nothing it was sent'}: the key joins thread and namespace "
                          "without escaping the separator" if others else
                          f"list() of thread {thread!r}, namespace {ns!r} lost its checkpoint",
                          [record.id], ids_of(got))
                continue
            expect_tuple(check, record, read(check, t.store, thread, ns), f"namespace {ns!r}: ")


@clause(needs=NEEDS)
def checkpoint_parents_form_a_tree(t: Target) -> None:
    """Each checkpoint's ``parent_config`` is the checkpoint whose id its ``put`` was
    given: along a chain, and for forks (puts from an older checkpoint, as replaying
    from history does), so a thread is a tree; ``get_tuple`` answers for every branch's
    checkpoints, ``list`` holds them all newest first, and the latest is the newest id.

    Catches a parent taken from the thread's latest checkpoint instead of the incoming
    config's id (forks then hang off the wrong node), a fork that overwrites the
    branch it left.
    """
    with checking(checkpoint_parents_form_a_tree, t.run) as check:
        sent = Sent()
        thread = t.new_session("cp-tree")
        made: dict[str, Record] = {}
        # (name, parent's name, value): a chain root-a1-a2, a fork of the root (b1, b2), a fork of a1 (c1).
        for name, parent, value in (("root", "", "root"), ("a1", "root", "a1"), ("a2", "a1", "a2"),
                                    ("b1", "root", "b1 (fork of root)"), ("c1", "a1", "c1 (fork of a1)"),
                                    ("b2", "b1", "b2")):
            record = sent.put(check, t, t.store, thread, "", made[parent].id if parent else None, {"v": value})
            if record is None:
                return
            made[name] = record
        b2 = made["b2"]
        for record in sent.of(thread):
            expect_tuple(check, record, read(check, t.store, thread, "", record.id), "a branch's checkpoint: ")
        expect_tuple(check, b2, read(check, t.store, thread, ""), "the latest (newest id): ")
        got = check.call(thread, "list()", t.store.call("list_checkpoints", thread, ""))
        _expect_ids(check, thread, "list()", sent.of(thread), got)


@clause(needs=NEEDS)
def checkpoint_writes_are_idempotent_and_ordered(t: Target) -> None:
    """Pending writes come back with their checkpoint in ``(task_path, task_id, idx)``
    order whatever order they were put in; a regular write is kept once per
    ``(task_id, idx)`` (a retried ``put_writes`` adds nothing, and its new value does not
    replace the first); a special channel of ``WRITES_IDX_MAP`` (``__error__``,
    ``__interrupt__``, ``__resume__``) is overwritten by the next; writes belong to the
    checkpoint and namespace they were put to, not its parent, child or sibling.

    Catches writes ordered by insertion, a retry that duplicates writes, an interrupt
    appended instead of overwritten, writes keyed by thread alone.
    """
    with checking(checkpoint_writes_are_idempotent_and_ordered, t.run) as check:
        sent = Sent()
        thread = t.new_session("cp-writes")
        first = sent.put(check, t, t.store, thread, "", None, {"a": 1})
        second = first and sent.put(check, t, t.store, thread, "", first.id, {"a": 2})
        other_ns = second and sent.put(check, t, t.store, thread, "inner", None, {"a": 3})
        if not other_ns or not first or not second:
            return
        # Put out of order: tasks on later paths first, a later task id before an earlier one.
        puts: list[tuple[str, str, list[tuple[str, Any]]]] = [
                ("~__pregel_pull, node_b", "task-b", [("x", "b0"), ("y", b"b1")]),
                ("~__pregel_pull, node_a", "task-z", [("x", "z0")]),
                ("~__pregel_pull, node_a", "task-c", [("x", "c0"), ("x", "c1"), ("y", None)]),
                ("", "input-task", [("__start__", {"messages": ["hi"]})])]
        for path, task, writes in puts:
            sent.write(check, t.store, t, second, writes, task, path)
        sent.write(check, t.store, t, second, [("x", "retried, not kept")], "task-z", "~__pregel_pull, node_a")
        for value in ("first interrupt", "second interrupt"):
            sent.write(check, t.store, t, second, [("__interrupt__", value)], "task-i", "~__pregel_push, 0")
        sent.write(check, t.store, t, second, [("__error__", "an error"), ], "task-c", "~__pregel_pull, node_a")
        sent.write(check, t.store, t, first, [("x", "on the parent")], "task-p", "p")
        sent.write(check, t.store, t, other_ns, [("x", "in another namespace")], "task-b", "~__pregel_pull, node_b")
        for record in (second, first, other_ns):
            expect_tuple(check, record, read(check, t.store, thread, record.ns, record.id),
                         f"checkpoint {'2' if record is second else '1' if record is first else 'in namespace inner'}"
                         ": ")


@clause(needs=NEEDS)
def delete_thread_removes_only_that_thread(t: Target) -> None:
    """``delete_thread`` removes every checkpoint and write of the thread, in every
    namespace; threads whose ids it is a prefix of, or that are a prefix of it (``x``,
    ``x-1``, ``x:1``, ``x%``, ``xy``) keep all of theirs, and so does every thread the
    input model relates to a deleted one (``x<c>y`` for every ASCII punctuation ``c``,
    ``A`` for ``%41``, ``case`` for ``Case``, ``w`` with whitespace around it); a new
    checkpoint in the deleted thread starts a fresh tree (no parent, no old writes).

    Catches a delete by ``LIKE 'x%'`` or a key-prefix scan (``x/*``, ``x.*``), a delete
    that lowercases or decodes the id, a delete of the default namespace only, writes
    left behind and found again by the next checkpoint.
    """
    with checking(delete_thread_removes_only_that_thread, t.run) as check:
        sent = Sent()
        x = t.new_session("cp-del")
        threads = [x, f"{x}-1", f"{x}:1", f"{x}%", f"{x}y", x[:-1]]
        for thread in threads:
            for ns in ("", "sub"):
                record = sent.put(check, t, t.store, thread, ns, None, {"owner": thread})
                if record is not None:
                    sent.write(check, t.store, t, record, [("w", thread)], "task")
        if check.call(x, "delete_thread()", t.store.call("delete_thread", x)) is RAISED:
            return
        for ns in ("", "sub"):
            got = check.call(x, "list() after delete_thread()", t.store.call("list_checkpoints", x, ns))
            if got not in (RAISED, []):
                check.add(x, f"delete_thread() left {len(got)} checkpoint(s) in namespace {ns!r}", [], ids_of(got))
        for thread in threads[1:]:
            for record in sent.of(thread):
                if not expect_tuple(check, record, read(check, t.store, thread, record.ns, record.id),
                                    f"after delete_thread({x!r}), thread {thread!r}: "):
                    break
        fresh = Sent()
        again = fresh.put(check, t, t.store, x, "", None, {"owner": "new"})
        if again is not None:
            expect_tuple(check, again, read(check, t.store, x, "", again.id), "a new checkpoint after the delete: ")
    _delete_leaves_related_threads(t)


def _delete_leaves_related_threads(t: Target) -> None:
    """Delete one side of every relation of the input model (``x``, ``%41``, ``Case``,
    ``w``): the other side keeps its checkpoint and writes. A thread id the saver
    refuses, or that does not read back its own checkpoint before any delete, is left
    out (a limit the report lists: thread ids are not yet in the input model's
    isolation clauses)."""
    relations = inputs.clear_relations(t.new_session("cp-del-rel-"))
    sent, setup = Sent(), Check(delete_thread_removes_only_that_thread, t.run)
    for thread in dict.fromkeys(s for r in relations for s in (r.cleared, r.kept)):
        record = sent.put(setup, t, t.store, thread, "", None, {"owner": thread})
        if record is not None:
            sent.write(setup, t.store, t, record, [("w", thread)], "task")
    apart = {thread for thread in {r.thread for r in sent.records.values()}
             if all(expect_tuple(setup, record, read(setup, t.store, thread, "", record.id))
                    for record in sent.of(thread))}
    left_out = len({s for r in relations for s in (r.cleared, r.kept)} - apart)
    if left_out:
        t.limits.append(f"{left_out} thread id(s) of the input model's relations refused or not read back as put; "
                        "delete_thread() not judged on them")
    with checking(delete_thread_removes_only_that_thread, t.run) as check:
        changed: set[str] = set()
        deleted = [s for s in dict.fromkeys(r.cleared for r in relations) if s in apart]
        for gone in deleted:
            if check.call(gone, "delete_thread()", t.store.call("delete_thread", gone)) is RAISED:
                return
            for r in relations:
                if r.cleared == gone and r.kept in apart and r.kept not in changed:
                    for record in sent.of(r.kept):
                        if not expect_tuple(check, record, read(check, t.store, r.kept, "", record.id),
                                            f"delete_thread({gone!r}) changed thread {r.kept!r} ({r.relation}: "
                                            f"{r.describe('delete')}): "):
                            changed.add(r.kept)
                            break
        for gone in deleted:
            got = check.call(gone, "list() after delete_thread()", t.store.call("list_checkpoints", gone, ""))
            if got not in (RAISED, []):
                check.add(gone, f"delete_thread() left {len(got)} checkpoint(s)", [], ids_of(got))


@clause(needs=NEEDS)
def checkpoint_sync_and_async_apis_agree(t: Target) -> None:
    """A saver that overrides both APIs gives through each what was put through the
    other: checkpoints, metadata, pending writes and ``list``. A saver with one API is
    judged on it alone (the clause says which, and passes).

    Catches async twins that keep a separate cache, a sync method that serializes
    differently from its async twin, a sync wrapper that drops a keyword.
    """
    apis = getattr(t.store.raw, "apis", ("async",))
    if len(apis) < 2:
        t.findings.append(f"the saver overrides only its {apis[0]} methods: every clause judged it through them")
        return
    with checking(checkpoint_sync_and_async_apis_agree, t.run) as check:
        sent = Sent()
        for put_api, read_api in (("sync", "async"), ("async", "sync")):
            thread = t.new_session(f"cp-{put_api}")
            parent = None
            for i in range(3):
                record = sent.put(check, t, t.store, thread, "", parent, {"v": f"{put_api} {i}", "b": bytes([i])},
                                  {"source": "loop", "step": i}, api=put_api)
                if record is None:
                    return
                sent.write(check, t.store, t, record, [("x", i)], f"task-{i}", api=put_api)
                parent = record.id
            for record in sent.of(thread):
                expect_tuple(check, record, read(check, t.store, thread, "", record.id, read_api),
                             f"put through {put_api}, read through {read_api}: ")
            got = check.call(thread, f"list() through {read_api}",
                             t.store.call("list_checkpoints", thread, "", {"step": 1}, None, None, read_api))
            _expect_ids(check, thread, f"list(filter step=1) through {read_api}",
                        [r for r in sent.of(thread) if r.metadata["step"] == 1], got)
