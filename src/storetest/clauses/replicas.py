"""Replicas: two handles on one backend (two pools, connections or file handles, as two
processes of one application would hold) see each other's writes at once.

Real bugs behind these clauses: a per-handle cache that other replicas' writes do not
invalidate (an incremental save trusting what it wrote last; a handle that remembers
"this queue was empty" and stops asking); data kept in process memory; locks that only
hold within one process or connection.
"""

from __future__ import annotations

from storetest._engine.failures import RAISED, Check, checking
from storetest._engine.harness import Handle, Target
from storetest.clauses._registry import clause
from storetest.clauses._support import texts
from storetest.clauses.steers import account, steer_race
from storetest.contract import Message


@clause(replica=True)
def replicas_share_transcripts(t: Target) -> None:
    """What one handle saves, another handle on the same backend reads, and a later save
    through either replaces it.

    Catches per-handle caches that go stale (an incremental save trusting what it wrote
    last when another replica has written since) and data kept in process memory.
    """
    assert t.replica is not None
    one, two = t.store, t.replica
    session = t.new_session("replicas")
    steps = [
        (one, texts(3, "one")),
        (two, texts(4, "two")),
        (one, [*texts(4, "two"), Message.text("user", "one adds")]),
        (two, texts(2, "two")),
        (one, [*texts(2, "two"), Message.text("user", "one again")]),
        (two, []),
    ]
    with checking(replicas_share_transcripts, t.run) as check:
        earlier: list[list[Message]] = [[]]
        for writer, transcript in steps:
            if check.call(session, f"save through the {writer.label}", writer.save(session, transcript)) is RAISED:
                return
            for label, reader in (("the second handle", two), ("the first handle", one)):
                got = check.call(session, f"messages() through {label}", reader.messages(session))
                if got is not RAISED and got != transcript and got in earlier:
                    check.add(session, f"stale read: {label} still sees a transcript saved before this "
                              "save (a per-handle cache that other replicas' writes do not "
                              "invalidate)", transcript, got)
                else:
                    check.transcript(session, transcript, got)
            if check.violations:
                return
            earlier.append(transcript)


def _steers_cross(check: Check, t: Target, session: str, first: Handle, second: Handle) -> None:
    """``first`` finds the queue empty, ``second`` adds, ``first`` must see it."""
    check.steers(session, [], check.call(session, "take_steers()", first.take_steers(session)))
    check.call(session, "add_steer()", second.add_steer(session, "left through the other handle"))
    got = check.call(session, "take_steers()", first.take_steers(session))
    if got == []:
        # Before blaming a cache: can the handle that added it take it?
        own = check.call(session, "take_steers()", second.take_steers(session))
        if own == ["left through the other handle"]:
            check.add(session, "a steer left through one handle never reached the other: after finding the "
                      "queue empty, the handle kept answering [] while the adding handle could take it (a "
                      "cached \"queue is empty\" that other replicas' adds do not invalidate)",
                      ["left through the other handle"], got)
        elif own == []:
            check.add(session, "a steer was lost: add_steer returned, and neither the handle that added it nor "
                      "the other can take it (the add stored nothing)", ["left through the other handle"], got)
        else:
            check.steers(session, ["left through the other handle"], own)
    else:
        check.steers(session, ["left through the other handle"], got)


@clause(needs=("steers",), replica=True, races=True)
def steers_are_taken_once_across_replicas(t: Target) -> None:
    """A steer left through any handle is taken through any other, exactly once and in
    order, also when takers on both handles race.

    Catches a handle that caches "this queue was empty" and stops asking the backend,
    steers numbered by each handle (two handles' first steers to a session share a
    number, and one replaces the other), and locks that only hold within one process
    or connection; counted as the
    single-handle race is (lost, duplicated, unexpected: all zero).
    """
    assert t.replica is not None
    one, two = t.store, t.replica
    with checking(steers_are_taken_once_across_replicas, t.run) as check:
        for first, second in ((one, two), (two, one)):
            session = t.new_session("replica-steers")
            _steers_cross(check, t, session, first, second)
            check.call(session, "add_steer()", first.add_steer(session, "left through one"))
            check.call(session, "add_steer()", second.add_steer(session, "left through two"))
            check.steers(session, ["left through one", "left through two"],
                         check.call(session, "take_steers()", second.take_steers(session)))
            check.steers(session, [], check.call(session, "take_steers()", first.take_steers(session)))
            # Each handle's first steer to a session: two handles that number steers
            # themselves, each from zero, give both the same number.
            fresh = t.new_session("replica-steers-fresh")
            check.call(fresh, "add_steer()", first.add_steer(fresh, "first through one handle"))
            check.call(fresh, "add_steer()", second.add_steer(fresh, "then through the other"))
            check.steers(fresh, ["first through one handle", "then through the other"],
                         check.call(fresh, "take_steers()", second.take_steers(fresh)), numbers=[(0, 0), (1, 0)])
        if check.violations:
            return
        for round_ in range(t.profile.race_rounds):
            session = t.new_session(f"replica-race{round_}")
            added, takes = steer_race(t, [one, two], session)
            t.tick()
            account(check, session, added, takes, handles=2)
            if check.violations:
                return
