"""Whole-session stores that delete (a transcript store with the ``deletes`` capability,
``delete``, as Microsoft Agent Framework's ``SessionStore`` has through
:func:`storetest.session_stores`): a delete removes its session and no other, and a
delete racing a save leaves the session gone or the save whole.

Real bugs behind these clauses: a delete by key pattern or prefix (``SCAN MATCH id*``,
``DELETE ... LIKE 'id%'``) or by a case-folded key, a delete that leaves a cached copy
behind, and a save written in steps (a delete between them leaves part of a session).
"""

from __future__ import annotations

import functools

from storetest._engine import inputs
from storetest._engine.diagnosis import shorten
from storetest._engine.failures import RAISED, checking, describe_exception
from storetest._engine.harness import Target
from storetest.clauses._registry import clause
from storetest.clauses._support import texts
from storetest.clauses.transcripts import confusable_ids
from storetest.contract import Message

NEEDS = ("deletes",)  # a store claiming it has save and messages too (session_stores does)


@clause(needs=NEEDS)
def delete_removes_the_session(t: Target) -> None:
    """``delete`` of a saved session leaves it empty and every other session as it was,
    however alike their ids (``x`` and ``x:messages``, ``X``, ``x*``, a trailing space),
    and so does every session the input model relates to a deleted one (``x<c>y`` for
    every ASCII punctuation ``c``, ``A`` for ``%41``, ``case`` for ``Case``, ``w`` with
    whitespace around it); deleting a session never saved raises nothing; a save after
    a delete lands whole.

    Catches a delete by key pattern or prefix (under any separator: ``x/*``, ``x.*``), a
    case- or accent-insensitive key, a delete that decodes the id, a delete that leaves
    a cached copy for the next read.
    """
    with checking(delete_removes_the_session, t.run) as check:
        never = t.new_session("delete-never")
        check.call(never, "delete() of a session never saved", t.store.call("delete", never))
        ids = confusable_ids(t.new_session("delete-"))
        saved: dict[str, list[Message]] = {}
        refused: dict[str, list[str]] = {}
        for i, session in enumerate(ids):
            transcript = texts(2, f"session {i}")
            try:
                t.run(t.store.save(session, transcript))
                saved[session] = transcript
            except (TypeError, ValueError) as exc:  # an id the store refuses: a limit, judged elsewhere
                refused.setdefault(describe_exception(exc).split(":")[0], []).append(session)
        for reason, which in refused.items():
            t.limits.append(f"{len(which)} session id(s) refused ({reason}): "
                            + ", ".join(shorten(s, 40) for s in which[:4]) + (" ..." if len(which) > 4 else ""))
        if len(saved) < 2:
            check.add(ids[0], f"only {len(saved)} of {len(ids)} sessions could be saved", len(ids), len(saved))
            return
        for target in [s for s in ("a", "k", "{k}") if any(i.endswith(s) for i in saved)]:
            victim = next(i for i in saved if i.endswith(target))
            if check.call(victim, "delete()", t.store.call("delete", victim)) is RAISED:
                continue
            got = check.call(victim, "messages() after delete()", t.store.messages(victim))
            if got is not RAISED and got != []:
                check.add(victim, f"after delete() the session still reads {len(got) if isinstance(got, list) else got}"
                          " message(s)", [], got)
            del saved[victim]
            for other, transcript in saved.items():
                back = check.call(other, "messages()", t.store.messages(other))
                if back is not RAISED and back != transcript:
                    check.add(other, f"deleting session {victim!r} changed session {other!r}: a delete by key "
                              "pattern or prefix, or a key that folds case or accents", transcript, back)
                    return
        again = texts(3, "after delete")
        last = next(iter(saved), None)
        if last is not None and check.call(last, "delete()", t.store.call("delete", last)) is not RAISED and \
                check.call(last, "save() after delete()", t.store.save(last, again)) is not RAISED:
            back = check.call(last, "messages()", t.store.messages(last))
            if back is not RAISED and back != again:
                check.add(last, "a save after a delete did not land whole", again, back)
    _delete_leaves_related_sessions(t)


def _delete_leaves_related_sessions(t: Target) -> None:
    """Delete one side of every relation of the input model (``x``, ``%41``, ``Case``,
    ``w``): the other side keeps its transcript. Ids the store refuses, or that do not
    read back what was saved (``related_ids_stay_apart``'s failures), are left out."""
    relations = inputs.clear_relations(t.new_session("delete-rel-"))
    saved: dict[str, list[Message]] = {}
    for i, session in enumerate(dict.fromkeys(s for r in relations for s in (r.cleared, r.kept))):
        try:
            t.run(t.store.save(session, texts(1, f"session {i}")))
            saved[session] = texts(1, f"session {i}")
        except Exception:
            continue  # refused: a limit, the isolation clauses' to report
    saved = {s: m for s, m in saved.items() if _reads(t, s) == m}
    with checking(delete_removes_the_session, t.run) as check:
        changed: set[str] = set()
        deleted = [s for s in dict.fromkeys(r.cleared for r in relations) if s in saved]
        for gone in deleted:
            if check.call(gone, "delete()", t.store.call("delete", gone)) is RAISED:
                return
            for r in relations:
                if r.cleared == gone and r.kept in saved and r.kept not in changed:
                    back = check.call(r.kept, "messages()", t.store.messages(r.kept))
                    if back is not RAISED and back != saved[r.kept]:
                        changed.add(r.kept)
                        check.add(r.kept, f"deleting session {gone!r} changed session {r.kept!r} ({r.relation}): "
                                  + r.describe("delete"), saved[r.kept], back)
        for gone in deleted:
            back = check.call(gone, "messages() after delete()", t.store.messages(gone))
            if back not in (RAISED, []):
                check.add(gone, "after delete() the session still reads messages", [], back)


def _reads(t: Target, session: str) -> object:
    try:
        return t.run(t.store.messages(session))
    except Exception:
        return RAISED


@clause(needs=NEEDS, races=True)
def delete_racing_save_leaves_gone_or_whole(t: Target) -> None:
    """A ``delete`` racing a ``save`` of a session that held a transcript raises nothing
    and leaves the session as if one ran first: gone (save, then delete) or exactly the
    new transcript (delete, then save), never the old one, never part of either.

    Catches a save written in steps (a delete, then the messages one by one; a file
    truncated, then written) that a delete lands between, and a delete that removes
    part of what a save wrote.
    """
    handles = t.handles()
    with checking(delete_racing_save_leaves_gone_or_whole, t.run) as check:
        for round_ in range(3 * t.profile.race_rounds):  # two calls overlap less often than a crowd
            t.tick()
            session = t.new_session(f"delete-race{round_}")
            old, new = texts(2, "old"), texts(4, "new")
            if check.call(session, "save()", t.store.save(session, old)) is RAISED:
                return
            deleter, saver = handles[0], handles[round_ % len(handles)]
            calls = [functools.partial(deleter.call, "delete", session), functools.partial(saver.save, session, new)]
            try:
                t.race(calls if round_ % 2 else calls[::-1])  # both orders in turn
            except Exception as exc:
                check.add(session, f"delete() racing save() raised {describe_exception(exc)}")
                return
            got = check.call(session, "messages()", t.store.messages(session))
            if got is RAISED:
                return
            if got not in ([], new):
                check.add(session, "after delete() raced save(), the session is neither gone nor exactly the new "
                          "transcript: the delete and the save interleaved", "[] or the new transcript", got)
                return
