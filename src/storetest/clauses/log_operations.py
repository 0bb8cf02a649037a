"""Fork and compaction over what an entry-log store keeps: a fork copies exactly the
active path into a new session; a compaction removes nothing, and branching to before
it gives the uncompacted path.

Real bugs behind these clauses: a fork that copies the whole tree, ids unique across
all sessions (a fork cannot copy them), a compaction that deletes what it summarized.
"""

from __future__ import annotations

from storetest._engine.failures import RAISED, checking, describe_exception
from storetest._engine.harness import Target
from storetest.clauses._log_support import _NEEDS, T0, _chain, _expect_log, _id, _ids, _msg, _read, log_handle
from storetest.clauses._registry import clause
from storetest.entries import Entry, SessionExists
from storetest.projections import compact, fork, model_view, path

# --- fork and compaction -----------------------------------------------------------------


@clause(needs=_NEEDS)
def log_fork_copies_the_active_path(t: Target) -> None:
    """A fork copies exactly the path from the root to the leaf (or to a chosen entry)
    into a new session, entry ids included, and leaves the source alone; a fork into a
    session that has entries is refused and writes nothing.

    Runs :func:`storetest.projections.fork`, which uses the store's own ``fork`` when it
    has one. Catches a native fork that copies the whole tree (``INSERT ... SELECT``
    without the walk up the parents), ``create`` that appends into an existing session,
    and entry ids unique across the backend (a fork cannot copy them).
    """
    log = log_handle(t.store)
    source = t.new_session("log-fork-src")
    tree = [*_chain("e", 4), _msg("edit", "e1"), _msg("edit-reply", "edit")]  # e2, e3 abandoned
    with checking(log_fork_copies_the_active_path, t.run) as check:
        if check.call(source, "append()", log.append(source, tree)) is RAISED:
            return
        for leaf in (None, "e3"):
            target = t.new_session("log-fork-dst")
            want = path(tree, leaf)
            try:
                t.run(fork(log, source, target, leaf))
            except Exception as exc:
                check.add(target, f"fork of {source!r} (leaf {leaf!r}) raised {describe_exception(exc)}"
                          + (": entry ids must be unique per session, not across the backend (a fork "
                             "copies them)" if isinstance(exc, ValueError) else ""))
                continue
            got = _read(check, t, target)
            if isinstance(got, list) and got != want and {e.id for e in tree} <= set(map(_id, got)):
                check.add(target, f"fork copied the whole tree: {len(got) - len(want)} entries off the "
                          f"active path came along (walk up from the leaf)", _ids(want), _ids(got))
            else:
                _expect_log(check, target, want, got, "the fork: ")
        _expect_log(check, source, tree, _read(check, t, source), "the fork's source: ")
        taken = t.new_session("log-fork-taken")
        mine = [_msg("mine", None)]
        if check.call(taken, "append()", log.append(taken, mine)) is RAISED:
            return
        try:
            t.run(fork(log, source, taken))
        except SessionExists:
            pass
        except Exception as exc:
            check.add(taken, f"a fork into a session with entries raised {describe_exception(exc)}, "
                      "not SessionExists")
        else:
            check.add(taken, "fork wrote into a session that already had entries (create must refuse a "
                      "session that exists)")
        _expect_log(check, taken, mine, _read(check, t, taken), "after a refused fork: ")


@clause(needs=_NEEDS)
def log_compaction_removes_nothing(t: Target) -> None:
    """A compaction only appends: every entry stays, the model reads the summary then
    the kept entries, and a branch from before the compaction reads the whole,
    uncompacted path.

    Catches "compaction" done as a truncation (``DELETE`` of what the summary covers, a
    rewritten file starting at the summary), which loses the history a rewind needs.
    """
    log = log_handle(t.store)
    session = t.new_session("log-compact")
    chain = _chain("e", 6)
    with checking(log_compaction_removes_nothing, t.run) as check:
        if check.call(session, "append()", log.append(session, chain)) is RAISED:
            return
        made = check.call(session, "compact()", compact(log, session, "summary of e0-e2", "e3",
                                                         entry_id="compaction", created_at=T0))
        if made is RAISED:
            return
        got = _read(check, t, session)
        if got is RAISED or not isinstance(got, list):
            return
        # By id: an entry kept with its time cut to milliseconds was not deleted.
        kept = {e.id for e in got if isinstance(e, Entry)}
        gone = [e.id for e in chain if e.id not in kept]
        if gone:
            check.add(session, f"the compaction deleted {len(gone)} entries it summarized (e.g. {gone[0]!r}): "
                      "a compaction only appends", _ids([*chain, made]), _ids(got))
            return
        if not _expect_log(check, session, [*chain, made], got, "after compaction: "):
            return
        if model_view(got) != [made, *chain[3:]]:
            check.add(session, "the model does not read the summary then the kept entries",
                      _ids([made, *chain[3:]]), _ids(model_view(got)))
        rewind = _msg("rewind", "e1")
        if check.call(session, "append() before the compaction", log.append(session, [rewind])) is RAISED:
            return
        got = _read(check, t, session)
        if isinstance(got, list) and model_view(got) != [*chain[:2], rewind]:
            check.add(session, "a branch from before the compaction does not read the uncompacted path",
                      _ids([*chain[:2], rewind]), _ids(path(got)))
