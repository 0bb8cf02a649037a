"""The checkpointer state machine: random puts (chained or forked), pending writes
(regular and special channels), and deletes over two handles and threads whose ids and
namespaces join alike, against a model of what was sent (:class:`Sent`), shrunk to the
shortest story that fails."""

from __future__ import annotations

from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from storetest._engine.failures import Check
from storetest._engine.harness import Target
from storetest.clauses._checkpoint_support import NEEDS, Sent, ids_of, tuple_difference
from storetest.clauses._registry import clause
from storetest.clauses._support import hypothesis_settings, seeded_machine

#: Channels a write goes to: regular ones, and two of WRITES_IDX_MAP's (which overwrite).
_CHANNELS = ("messages", "branch", "__interrupt__", "__error__")
#: Values of the serde's kinds; no NUL in text (``checkpoint_values_keep_nul`` alone sends
#: it), and no lone surrogate: it is not valid Unicode, and msgpack writes it as '?'.
_VALUES = st.one_of(st.none(), st.integers(-3, 3),
                    st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=6),
                    st.binary(max_size=4),
                    st.lists(st.integers(0, 2), max_size=2))


@clause(needs=NEEDS, symptom=True, cost=2)
def checkpointer_matches_model(t: Target) -> None:
    """Random interleavings of ``put`` (after a thread's latest checkpoint, from an older
    one, or a new root), ``put_writes`` of tasks to any checkpoint (a retry included,
    special channels alone, as LangGraph puts them) and ``delete_thread``, through every handle, over threads
    ``x`` and ``x:b`` and thread ``x``'s namespace ``b``, match the model at every
    step: each checkpoint read by id exactly as sent, with its writes; ``list`` of each
    thread and namespace newest first.

    Catches bugs that only appear in combination: a latest pointer a delete leaves
    stale, writes of a deleted thread found again, a fork that moves another branch.
    """
    handles = t.handles()
    which = st.integers(0, 2)
    handle = st.integers(0, len(handles) - 1)

    class CheckpointModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            x = t.new_session("cp-model-x")
            self.places = [(x, ""), (f"{x}:b", ""), (x, "b")]
            self.sent = Sent()

        def _fail(self, thread: str, diagnosis: str, sent: object = None, got: object = None) -> None:
            check = Check(checkpointer_matches_model)
            check.add(thread, diagnosis, sent, got)
            check.raise_if_any()

        @rule(p=which, h=handle, parent=st.sampled_from(("latest", "older", "root")), value=_VALUES)
        def put(self, p: int, h: int, parent: str, value: Any) -> None:
            thread, ns = self.places[p]
            there = self.sent.of(thread, ns)
            base = None if parent == "root" or not there else there[0].id if parent == "latest" else there[-1].id
            record, cp, versions = self.sent.prepare(handles[h], thread, ns, base, {"v": value, "step": len(there)})
            note(f"handle {h}: put({thread!r}, {ns!r}, parent={base!r}) -> {record.id}")
            t.run(handles[h].call("put_checkpoint", thread, ns, base, cp, record.raw_metadata, versions))
            self.sent.records[record.id] = record

        @rule(p=which, h=handle, pick=st.integers(0, 5), task=st.sampled_from(("t1", "t2")),
              channel=st.sampled_from(_CHANNELS), value=_VALUES)
        def write(self, p: int, h: int, pick: int, task: str, channel: str, value: Any) -> None:
            thread, ns = self.places[p]
            there = self.sent.of(thread, ns)
            if not there:
                return
            record = there[pick % len(there)]
            # A special channel's write goes alone, as LangGraph's runtime puts it (the savers
            # overwrite it only in a batch of special writes).
            writes = [(channel, value)] if channel.startswith("__") else [(channel, value), ("messages", task)]
            note(f"handle {h}: put_writes({thread!r}, {ns!r}, {record.id}, {writes!r}, {task!r})")
            t.run(handles[h].call("put_writes", thread, ns, record.id, writes, task, f"path {task}"))
            Sent.remember(record, writes, task, f"path {task}")

        @rule(p=which, h=handle)
        def delete(self, p: int, h: int) -> None:
            thread, _ = self.places[p]
            note(f"handle {h}: delete_thread({thread!r})")
            t.run(handles[h].call("delete_thread", thread))
            for r in self.sent.of(thread):
                del self.sent.records[r.id]

        @invariant()
        def every_thread_matches(self) -> None:
            for thread, ns in self.places:
                want = self.sent.of(thread, ns)
                got = t.run(handles[-1].call("list_checkpoints", thread, ns))
                if ids_of(got) != [r.id for r in want]:
                    self._fail(thread, f"list() of thread {thread!r}, namespace {ns!r} does not hold what was put "
                               "there, newest first", [r.id for r in want], ids_of(got))
                for record in want:
                    found = tuple_difference(record, t.run(handles[0].call("get_checkpoint", thread, ns, record.id)))
                    if found:
                        self._fail(thread, f"checkpoint {record.id} in namespace {ns!r}: {found}")

    settings = hypothesis_settings(t, scale=0.5, steps=min(t.profile.model_steps, 30))
    run_state_machine_as_test(seeded_machine(t, CheckpointModel), settings=settings)  # type: ignore[no-untyped-call, unused-ignore]
