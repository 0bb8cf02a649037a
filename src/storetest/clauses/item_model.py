"""The item-history state machine: random adds, pops, clears and limited reads over
two handles and sessions with confusable ids, against a plain dict of lists, shrunk to
the shortest story that fails."""

from __future__ import annotations

import copy

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from storetest._engine.diagnosis import shorten
from storetest._engine.failures import Check
from storetest._engine.harness import Target
from storetest._engine.item_diagnosis import describe_items, describe_limit
from storetest.clauses._item_support import NEEDS, expect, protocol
from storetest.clauses._registry import clause
from storetest.clauses._support import hypothesis_settings, seeded_machine
from storetest.items import Item, same_items, same_value


@clause(needs=NEEDS, symptom=True, cost=2)
def item_history_matches_model(t: Target) -> None:
    """Random interleavings of ``add_items``, ``pop_item``, ``clear_session`` and
    ``get_items(limit)``, over sessions with confusable ids and every handle, match a
    plain dict of lists at every step.

    Catches bugs that only appear in combination: a counter or cache that a pop or a
    clear leaves stale, a limit read wrong after a pop, an add after a clear that brings
    back the old items.
    """
    handles = t.handles()
    values = protocol(t)  # a chat history has no pop and no limit, a history provider no clear either
    which = st.integers(0, 2)
    handle = st.integers(0, len(handles) - 1)

    class ItemModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            prefix = t.new_session("items-model-")
            self.sessions = [prefix + s for s in ("x", "X", "x:messages")]
            self.model: dict[str, list[Item]] = {s: [] for s in self.sessions}
            # What each session held before a clear or a pop took it, and the last clear.
            self.gone: dict[str, list[Item]] = {s: [] for s in self.sessions}
            self.last_clear = ""  # the session the step just taken cleared, if it was a clear

        def _elsewhere(self, session: str) -> dict[str, list[Item]]:
            out = {f"session {other!r}": self.model[other] for other in self.sessions if other != session}
            out["this session before a clear or pop took them"] = self.gone[session]
            return out

        def _fail(self, session: str, diagnosis: str, expected: object = None, got: object = None) -> None:
            check = Check(item_history_matches_model)
            check.add(session, diagnosis, expected=expected, got=got)
            check.raise_if_any()

        @rule(s=which, h=handle, batch=values.model_batches)
        def add(self, s: int, h: int, batch: list[Item]) -> None:
            session, self.last_clear = self.sessions[s], ""
            note(f"handle {h}: add_items({session!r}, {len(batch)} items)")
            t.run(handles[h].call("add_items", session, copy.deepcopy(batch)))
            self.model[session] += batch

        @precondition(lambda self: values.pops)
        @rule(s=which, h=handle)
        def pop(self, s: int, h: int) -> None:
            session, self.last_clear = self.sessions[s], ""
            note(f"handle {h}: pop_item({session!r})")
            got = t.run(handles[h].call("pop_item", session))
            want = self.model[session].pop() if self.model[session] else None
            if want is not None:
                self.gone[session].append(want)
            if not same_value(want, got):
                self._fail(session, f"pop_item() returned {shorten(got)}, not the newest item {shorten(want)}",
                           want, got)

        @precondition(lambda self: values.clears)
        @rule(s=which, h=handle)
        def clear(self, s: int, h: int) -> None:
            session = self.sessions[s]
            note(f"handle {h}: clear_session({session!r})")
            t.run(handles[h].call("clear_session", session))
            self.gone[session] += self.model[session]
            self.model[session] = []
            self.last_clear = session

        @rule(s=which, h=handle, limit=st.none() | st.integers(0, 6) if values.limits else st.none())
        def read(self, s: int, h: int, limit: int | None) -> None:
            session, self.last_clear = self.sessions[s], ""
            note(f"handle {h}: get_items({session!r}, limit={limit})")
            got = t.run(handles[h].call("get_items", session, limit))
            stored = self.model[session]
            want = stored if limit is None else (stored[-limit:] if limit else [])
            if not same_items(want, got):
                self._fail(session, describe_limit(stored, limit, got) if limit is not None
                           else describe_items(stored, got, self._elsewhere(session)), want, got)

        @invariant()
        def every_session_matches(self) -> None:
            check = Check(item_history_matches_model)
            for session in self.sessions:
                got = t.run(handles[-1].call("get_items", session))
                if got == [] and self.model[session] and self.last_clear not in ("", session):
                    check.add(session, f"the clear of session {self.last_clear!r} emptied this session too "
                              "(a clear by key pattern or prefix: SCAN MATCH id*, DELETE ... LIKE 'id%')",
                              expected=self.model[session], got=got)
                    continue
                expect(check, session, self.model[session], got, elsewhere=self._elsewhere(session), expected=True)
            # A limited read too, of every session: limits are where a stale count or offset shows.
            for session in self.sessions if values.limits else ():
                for limit in (1, 2):
                    got = t.run(handles[0].call("get_items", session, limit))
                    if not same_items(self.model[session][-limit:], got):
                        check.add(session, describe_limit(self.model[session], limit, got),
                                  expected=self.model[session][-limit:], got=got)
            check.raise_if_any()

    settings = hypothesis_settings(t, scale=0.5, steps=t.profile.model_steps)
    run_state_machine_as_test(seeded_machine(t, ItemModel), settings=settings)  # type: ignore[no-untyped-call, unused-ignore]
