"""The entry-log state machine: random appends (good and bad), creates, forks and
compactions against a plain model, shrunk to the shortest story that fails.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from storetest._engine import strategies
from storetest._engine.diagnosis import describe_log
from storetest._engine.failures import Check
from storetest._engine.harness import Target
from storetest.clauses._log_support import _NEEDS, T0, _expect_log, _ids, _msg, log_handle
from storetest.clauses._registry import clause
from storetest.clauses._support import hypothesis_settings, seeded_machine
from storetest.entries import Entry
from storetest.projections import compact, fork, path

# --- the model ---------------------------------------------------------------------------


@clause(needs=_NEEDS, symptom=True, cost=2)
def log_store_matches_model(t: Target) -> None:
    """Random interleavings of appends (good and bad), creates, forks, compactions and
    reads, over several sessions with confusable ids and every handle, match a plain
    dict of lists at every step.

    Catches bugs that only appear in combination: a cache updated on append but not on
    create, a refused batch that poisons the next one, ids checked in the wrong session.
    """
    handles = t.handles()
    index = st.integers(0, 2)
    which_handle = st.integers(0, len(handles) - 1)

    class LogModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.prefix = prefix = t.new_session("log-model-")
            self.sessions = [prefix + s for s in ("a", "A", "a ")]
            self.logs: dict[str, list[Entry]] = {s: [] for s in self.sessions}
            self.compactions = 0

        def _compare(self, session: str, got: object) -> None:
            check = Check(log_store_matches_model)
            _expect_log(check, session, self.logs[session], got, expected=True)
            check.raise_if_any()

        @rule(which=index, handle=which_handle, data=st.data())
        def append(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            batch = data.draw(strategies.logs(
                max_size=3, first_parents=tuple(e.id for e in self.logs[session]), simple=True,
                id_prefix=self.prefix))
            note(f"handle {handle}: append({session!r}, {[e.id for e in batch]})")
            t.run(handles[handle].call("append", session, batch))
            self.logs[session] += batch

        @precondition(lambda self: any(self.logs.values()))
        @rule(which=index, handle=which_handle, data=st.data())
        def append_refused(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            known = [e.id for e in self.logs[session]]
            bad = data.draw(st.sampled_from([*known, "orphan"])) if known else "orphan"
            batch = [_msg(f"ok-{len(known)}", known[-1] if known else None),
                     _msg(bad, None) if bad != "orphan" else _msg("orphan", "no-such-parent")]
            note(f"handle {handle}: append({session!r}, {[e.id for e in batch]}) must be refused")
            check = Check(log_store_matches_model)
            what = "an unknown parent" if bad == "orphan" else "a reused id"
            try:
                t.run(handles[handle].call("append", session, batch))
            except ValueError:
                got = t.run(handles[handle].call("entries", session))
                if got != self.logs[session]:
                    check.add(session, f"the refused batch (with {what}) was partly written: "
                              + describe_log(self.logs[session], got), expected=_ids(self.logs[session]),
                              got=_ids(got))
            else:
                check.add(session, f"a batch with {what} was accepted")
            check.raise_if_any()

        @rule(which=index, handle=which_handle, data=st.data())
        def create(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            batch = data.draw(strategies.logs(max_size=3, simple=True, id_prefix=self.prefix).filter(bool))
            note(f"handle {handle}: create({session!r}, {[e.id for e in batch]})")
            made = t.run(handles[handle].call("create", session, batch))
            want = not self.logs[session]
            if made is not want:
                check = Check(log_store_matches_model)
                check.add(session, f"create() returned {made!r} on a session with "
                          f"{len(self.logs[session])} entries")
                check.raise_if_any()
            if want:
                self.logs[session] = list(batch)

        @precondition(lambda self: any(self.logs.values()))
        @rule(which=index, handle=which_handle, data=st.data())
        def fork_or_compact(self, which: int, handle: int, data: st.DataObject) -> None:
            session = self.sessions[which]
            line = path(self.logs[session])
            if not line:
                return
            log = log_handle(handles[handle])
            if data.draw(st.booleans(), label="fork"):
                leaf = data.draw(st.sampled_from([e.id for e in self.logs[session]]), label="leaf")
                target = t.new_session("log-model-fork")
                note(f"handle {handle}: fork({session!r} at {leaf!r} into {target!r})")
                t.run(fork(log, session, target, leaf))
                self.logs[target] = path(self.logs[session], leaf)
                self._compare(target, t.run(handles[-1].call("entries", target)))
            else:
                keep = data.draw(st.sampled_from([e.id for e in line]), label="first kept")
                note(f"handle {handle}: compact({session!r}, keeping from {keep!r})")
                made = t.run(compact(log, session, "summary", keep, entry_id=f"{self.prefix}c{self.compactions}",
                                     created_at=T0))
                self.compactions += 1
                self.logs[session].append(made)

        @rule(which=index, handle=which_handle)
        def read(self, which: int, handle: int) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: entries({session!r})")
            self._compare(session, t.run(handles[handle].call("entries", session)))

        @invariant()
        def first_session_matches(self) -> None:
            self._compare(self.sessions[0], t.run(handles[-1].call("entries", self.sessions[0])))

    settings = hypothesis_settings(t, scale=0.5, steps=t.profile.model_steps)
    run_state_machine_as_test(seeded_machine(t, LogModel), settings=settings)  # type: ignore[no-untyped-call, unused-ignore]
