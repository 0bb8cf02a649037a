"""The model: random interleavings of every operation over several sessions and
handles, checked step by step against a plain dict, as zarr checks its stores.

Hypothesis shrinks a failure to the shortest story of operations that shows it, within
the profile's shrinking budget.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from storetest._engine import strategies
from storetest._engine.diagnosis import describe_id_merge, describe_unseen_steers
from storetest._engine.failures import Check
from storetest._engine.harness import Target
from storetest.clauses._registry import clause
from storetest.clauses._support import hypothesis_settings, run_uncaught, seeded_machine
from storetest.contract import Message


@clause(symptom=True, cost=2)
def store_matches_model(t: Target) -> None:
    """Long random interleavings of every operation the store claims, over several
    sessions and handles, match a plain in-memory model at every step.

    Runs as many steps as the profile says (50 by default, hundreds when thorough).
    Catches bugs that only appear in combination or late: a cache invalidated on one
    path but not another, a take that clears the transcript, ids merged only after a
    write, a store that forgets after its Nth write.
    """
    handles = t.handles()
    steers = t.has("steers")
    index = st.integers(0, 4)
    which_handle = st.integers(0, len(handles) - 1)

    class StoreModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            t.tick()
            prefix = t.new_session("model-")
            self.sessions = [prefix + s for s in ("a", "A", "a ", "é", "e\u0301")]
            self.transcripts: dict[str, list[Message]] = {}
            # Each session's transcript before its last save: a read that returns it (a save
            # ignored) or it joined to the new one (appended) is named so.
            self.previous: dict[str, list[Message]] = {}
            self.steers: dict[str, list[str]] = {}
            # For each queued steer, its handle and how many steers that handle had added to
            # the session before it: steers two handles numbered alike are named so.
            self.numbers: dict[str, list[tuple[int, int]]] = {}
            #: What each session's takes have returned, so a steer handed out again is named.
            self.taken: dict[str, list[str]] = {}
            #: (session, handle): that handle's last take of the session returned [] and it
            #: has added nothing there since; a later [] after another handle's add is named.
            self.found_empty: set[tuple[str, int]] = set()
            self.added: Counter[tuple[str, int]] = Counter()
            self.written: dict[str, int] = {}  # session -> the step that last wrote it
            self.step = 0

        def _wrote(self, session: str) -> None:
            self.step += 1
            self.written[session] = self.step

        def _merged_with(self, session: str, kind: str, sent: Any, got: Any) -> str | None:
            """Another session whose data ``got`` is: a merge, not a lost write."""
            if not isinstance(got, list):
                return None
            for other in self.sessions:
                if other == session or self.written.get(other, 0) <= self.written.get(session, 0):
                    continue
                if kind == "transcript" and other in self.transcripts and got == self.transcripts[other]:
                    return other
                if kind == "steers" and self.steers.get(other) and \
                        Counter(got) == Counter(sent) + Counter(self.steers[other]):
                    return other
            return None

        def _check(self, session: str, kind: str, sent: Any, got: Any, numbers: list[tuple[int, int]] | None = None,
                   previous: list[Message] | None = None, taken: list[str] | None = None) -> None:
            check = Check(store_matches_model)
            other = self._merged_with(session, kind, sent, got) if got != sent else None
            if other is not None:
                what = "the transcript saved to" if kind == "transcript" else "steers left for"
                check.add(session, f"sessions merged: reading {session!r} gave {what} {other!r}: "
                          + describe_id_merge(session, other), expected=sent, got=got)
            elif kind == "transcript":
                check.transcript(session, sent, got, previous or (), expected=True)
            else:
                check.steers(session, sent, got, expected=True, numbers=numbers, taken=taken or ())
            check.raise_if_any()

        @rule(which=index, handle=which_handle, transcript=strategies.model_transcripts)
        def save(self, which: int, handle: int, transcript: list[Message]) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: save({session!r}, {len(transcript)} messages)")
            run_uncaught(t, handles[handle].save(session, transcript))
            self.previous[session] = self.transcripts.get(session, [])
            self.transcripts[session] = list(transcript)
            self._wrote(session)

        @rule(which=index, handle=which_handle)
        def read(self, which: int, handle: int) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: messages({session!r})")
            got = run_uncaught(t, handles[handle].messages(session))
            self._check(session, "transcript", self.transcripts.get(session, []), got,
                        previous=self.previous.get(session))

        @precondition(lambda self: steers)
        @rule(which=index, handle=which_handle, text=strategies.model_steers)
        def add_steer(self, which: int, handle: int, text: str) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: add_steer({session!r}, {text!r})")
            run_uncaught(t, handles[handle].add_steer(session, text))
            self.steers.setdefault(session, []).append(text)
            self.numbers.setdefault(session, []).append((handle, self.added[session, handle]))
            self.added[session, handle] += 1
            self.found_empty.discard((session, handle))
            self._wrote(session)

        @precondition(lambda self: steers)
        @rule(which=index, handle=which_handle)
        def take(self, which: int, handle: int) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: take_steers({session!r})")
            got = run_uncaught(t, handles[handle].take_steers(session))
            sent = self.steers.pop(session, [])
            numbers = self.numbers.pop(session, [])
            if got == [] and sent and all(h != handle for h, _ in numbers):
                self._unseen(session, handle, sent, [h for h, _ in numbers])
            self._check(session, "steers", sent, got, numbers, taken=self.taken.get(session, []))
            self.taken.setdefault(session, []).extend(sent)
            if got == []:
                self.found_empty.add((session, handle))
            else:
                self.found_empty.discard((session, handle))

        def _unseen(self, session: str, taker: int, sent: list[str], adders: list[int]) -> None:
            """A take on ``taker`` returned [] while other handles' steers were queued: ask
            the handle that added first whether they were stored, and whether ``taker`` sees
            that handle's steer on a new session, before naming a cause."""
            adders = list(dict.fromkeys(adders))
            adder = handles[adders[0]]
            note(f"handle {adders[0]}: take_steers({session!r}), to see whether the steers were stored")
            took = run_uncaught(t, adder.take_steers(session))
            fresh = t.new_session("model-probe")
            note(f"handle {adders[0]}: add_steer({fresh!r}, 'probe'); handle {taker}: take_steers({fresh!r})")
            run_uncaught(t, adder.add_steer(fresh, "probe"))
            sees_fresh = run_uncaught(t, handles[taker].take_steers(fresh)) == ["probe"]
            line = describe_unseen_steers(taker, sent, adders, took, (session, taker) in self.found_empty,
                                          sees_fresh)
            if line is not None:
                check = Check(store_matches_model)
                check.add(session, line, expected=sent, got=[])
                check.raise_if_any()

        @invariant()
        def first_session_matches(self) -> None:
            session = self.sessions[0]
            got = run_uncaught(t, handles[-1].messages(session))
            self._check(session, "transcript", self.transcripts.get(session, []), got,
                        previous=self.previous.get(session))

    settings = hypothesis_settings(t, scale=0.5, steps=t.profile.model_steps)
    run_state_machine_as_test(seeded_machine(t, StoreModel), settings=settings)  # type: ignore[no-untyped-call, unused-ignore]
