"""Expiry: what a store keeps, it keeps over time. The suite's other clauses read back
within seconds of writing, so they cannot see a store that expires its data (a Redis
key with a TTL, a cache in front of the store): this clause, run only when asked
(``--storetest-idle SECONDS``, ``storetest check --idle SECONDS``,
``check(idle=SECONDS)``), writes, waits that long, and reads back.

Real bugs behind it: ``SETEX``/``EXPIRE`` on every key "to keep Redis tidy", a TTL
index in MongoDB, an LRU cache in front of the backend answering for it.
"""

from __future__ import annotations

from storetest._engine.failures import RAISED, checking
from storetest._engine.harness import Target
from storetest.clauses._log_support import _msg, _read
from storetest.clauses._registry import clause
from storetest.clauses._support import texts
from storetest.entries import Entry


@clause(needs=(), idle=True)
def data_survives_idle(t: Target) -> None:
    """A transcript, a queued steer and log entries written, then left untouched for
    the idle time asked for, are all still there, through every handle.

    Catches keys written with a TTL (``SETEX``, ``EXPIRE``, a MongoDB TTL index) and
    caches that answer for the backend and forget.
    """
    assert t.profile.idle is not None
    session = t.new_session("idle")
    transcript = texts(2, "kept while idle")
    log: list[Entry] = [_msg("idle-0", None)]
    with checking(data_survives_idle, t.run) as check:
        if t.has("transcript") and check.call(session, "save()", t.store.save(session, transcript)) is RAISED:
            return
        if t.has("steers") and check.call(session, "add_steer()", t.store.add_steer(session, "kept")) is RAISED:
            return
        if t.has("log") and check.call(session, "append()", t.store.call("append", session, log)) is RAISED:
            return
        t.watch.sleep(t.profile.idle)  # Ctrl-C ends it: nothing is in the store meanwhile
        gone = f"after {t.profile.idle:g} s idle: "
        for handle in t.handles():
            if t.has("transcript"):
                got = check.call(session, "messages()", handle.messages(session))
                if got is not RAISED and got != transcript:
                    check.add(session, gone + ("the transcript expired (keys written with a TTL, or a "
                              "cache that forgets)" if got == [] else "the transcript changed"), transcript, got)
            if t.has("log"):
                got = _read(check, t, session, handle)
                if got is not RAISED and got != log:
                    check.add(session, gone + ("the log expired (keys written with a TTL, or a cache "
                              "that forgets)" if got == [] else "the log changed"), log, got)
        if t.has("steers"):
            taken = check.call(session, "take_steers()", t.store.take_steers(session))
            if taken is not RAISED and taken != ["kept"]:
                check.add(session, gone + ("the queued steer expired" if taken == [] else "the steers changed"),
                          ["kept"], taken)
