"""Crashes: a process writing through the store is killed at random points, then the
data is opened anew (``reopen=``) and must hold every acknowledged write, none in part,
and take the next write. Opt-in: without ``reopen`` these clauses are skipped.

Each clause runs lives of one child process (forked by the run's fork server, which
holds the ``reopen`` factory itself, or where children are spawned, by a helper spawned
once that imported it; see :mod:`storetest._engine.crashing`): the child
opens the store with ``reopen``, makes one call after another and says before and after
each what it did, and dies at a random moment inside a chosen call, by SIGKILL, or, when
the data is in a directory, by the kernel at a random byte of a write (a file-size
limit). The parent then opens the data with ``reopen`` itself, judges what it reads
against what the child had acknowledged, makes the next write and reads it back. The
call in flight at the death may have landed or not, never in part. The profile bounds
the kills and the seconds (``crash_kills``, ``crash_seconds``); a passing clause's
diagnosis gives the figures.

Real bugs behind these clauses: a JSONL reader that parses a torn last line (or repairs
it, as partial-JSON parsers do), one that skips a bad line in the middle instead of
refusing it, a torn tail left in place so the next append glues onto it, a batch
committed row by row, a write acknowledged before it reached the kernel (a buffer, a
write-behind thread), a take that returns before its delete commits.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import re
import resource
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Final

from storetest._engine import forking, stops
from storetest._engine.crashing import START_TIMEOUT, Life, Zygote, record
from storetest._engine.diagnosis import describe_log, shorten
from storetest._engine.failures import Check, checking, describe_exception
from storetest._engine.harness import FactoryError, Handle, Target, open_target, parameter_names
from storetest._engine.profiles import PROFILES
from storetest.clauses._item_support import protocol
from storetest.clauses._registry import clause
from storetest.contract import Message, OutcomeUnknown, Text
from storetest.entries import Entry
from storetest.items import same_items

__all__ = ["crash_child"]

T0: Final = datetime(2026, 5, 1, 9, 30, 0, 250001, timezone(timedelta(hours=2)))
#: Calls a child makes before the one it dies in (chosen at random up to this).
_MOST_BEFORE: Final = 3
#: Lives per log or item session before the next starts afresh (bounds what a read costs).
_LIVES_PER_SESSION: Final = 4
_WORK: Final = f"{__name__}:crash_child"


# --- the calls and what they write -------------------------------------------------------


def _transcript(n: int) -> list[Message]:
    """Save ``n``'s transcript: up to 24 messages of up to 3 KB, the first half shared by
    every save of that length (so incremental saves keep a prefix); empty now and then."""
    if n % 11 == 5:
        return []
    length = 1 + (n * 7919) % 24
    body = [Message.text("user" if i % 2 == 0 else "assistant",
                         (f"{i}/{length} shared " if i < length // 2 else f"{i}/{length} of save {n} ")
                         + "x" * ((length * 131 + i * 977) % 3000))
            for i in range(length - 1)]
    return [*body, Message.text("assistant", f"end of save {n}, {length} messages")]


_SEAL = re.compile(r"end of save (\d+), \d+ messages")


def _save_number(messages: object) -> int | None:
    """Which save's transcript ``messages`` is exactly (-1: the empty one), or ``None``."""
    if not isinstance(messages, list):
        return None
    if not messages:
        return -1
    last = messages[-1]
    part = last.content[0] if isinstance(last, Message) and last.content else None
    match = _SEAL.fullmatch(part.text) if isinstance(part, Text) else None
    if match is None:
        return None
    n = int(match.group(1))
    return n if messages == _transcript(n) else None


def _batch(n: int) -> list[Entry]:
    """Batch ``n`` of a log: 1-9 entries of up to 24 KB (one of 200 KB in every fourth
    batch), ids naming the batch and its size (``b17-3of9``)."""
    size = 1 + (n * 5) % 9
    out: list[Entry] = []
    for i in range(size):
        chars = 200_000 if n % 4 == 1 and i == 0 else ((n * 7 + i * 13) % 17) * 1500
        out.append(Entry.message(f"b{n}-{i}of{size}", out[-1].id if out else None,
                                 T0 + timedelta(seconds=n, microseconds=i),
                                 Message.text("user", f"batch {n} entry {i} " + "y" * chars)))
    return out


def _items(n: int) -> list[dict[str, Any]]:
    """Batch ``n`` of an item history, sized like :func:`_batch`."""
    size = 1 + (n * 5) % 9
    return [{"role": "user", "content": f"b{n}-{i}of{size} " + "z" * (((n * 7 + i * 13) % 17) * 1500)}
            for i in range(size)]


def _steer(n: int) -> str:
    return f"steer {n}"


# A checkpointer's calls: number n is a put when n % 3 == 0, else put_writes to put n - n % 3.
# Each put sets channels of its own (named after n), so no checkpoint reads another's blob
# and one that never landed leaves no other without its values.


def _checkpoint_id(session: str, n: int) -> str:
    """Put ``n``'s checkpoint id: the same in the child and the parent, increasing with
    ``n`` (a UUID-shaped string whose last group is ``n``: ids compare as text)."""
    h = hashlib.sha1(session.encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-6{h[12:15]}-8{h[15:18]}-{n:012x}"


def _checkpoint_values(n: int) -> dict[str, Any]:
    return {f"text {n}": f"put {n} " + "c" * (((n * 7919) % 17) * 3000), f"bytes {n}": bytes([n % 256, 0]) * 700}


def _checkpoint_writes(n: int) -> list[tuple[str, Any]]:
    return [(f"w {n}", f"write {n} " + "w" * (((n * 131) % 13) * 2000)), (f"x {n}", b"\x00" + bytes([n % 256]))]


def _checkpoint_call(h: Handle, session: str, n: int) -> Coroutine[Any, Any, Any]:
    if n % 3:
        return h.call("put_writes", session, "", _checkpoint_id(session, n - n % 3), _checkpoint_writes(n),
                      f"task {n}", f"path {n}")
    from storetest.bindings.langgraph import checkpoint

    values = _checkpoint_values(n)
    versions = {channel: h.raw.next_version(None) for channel in values}  # type: ignore[attr-defined]
    parent = _checkpoint_id(session, n - 3) if n >= 3 else None
    cp = checkpoint(values, versions, checkpoint_id=_checkpoint_id(session, n))
    return h.call("put_checkpoint", session, "", parent, cp, {"source": "loop", "step": n}, versions)


def _checkpoint_size(n: int) -> int:
    return sum(len(v) + 40 for _, v in (_checkpoint_writes(n) if n % 3 else _checkpoint_values(n).items()))


@dataclass
class _Kind:
    """One kind of store: the call a child makes as its ``n``-th, what to send back
    about its result, and about how many bytes it writes."""

    call: Callable[[Handle, str, int], Coroutine[Any, Any, Any]]
    ack: Callable[[int, Any], dict[str, Any]] = lambda n, result: {}
    size: Callable[[int], int] = lambda n: 4096


def _takes(n: int) -> bool:
    return n % 3 == 2


def _pops(n: int, handle: Handle | None = None) -> bool:
    """Whether call ``n`` is a pop: every fourth, on a history whose protocol has pops."""
    protocol = getattr(handle.raw, "storetest_protocol", None) if handle is not None else None
    return n % 4 == 3 and getattr(protocol, "pops", True) is not False


def _text_bytes(messages: list[Message]) -> int:
    return sum(len(p.text) + 40 for m in messages for p in m.content if isinstance(p, Text))


_KINDS: Final[dict[str, _Kind]] = {
    "transcript": _Kind(lambda h, s, n: h.save(s, _transcript(n)), size=lambda n: _text_bytes(_transcript(n))),
    "steers": _Kind(lambda h, s, n: h.take_steers(s) if _takes(n) else h.add_steer(s, _steer(n)),
                    ack=lambda n, result: {"s": list(result)} if _takes(n) else {}, size=lambda n: 200),
    "log": _Kind(lambda h, s, n: h.call("append", s, _batch(n)),
                 size=lambda n: _text_bytes([e.payload for e in _batch(n) if isinstance(e.payload, Message)])),
    "checkpoints": _Kind(_checkpoint_call, size=_checkpoint_size),
    "items": _Kind(lambda h, s, n: h.call("pop_item", s) if _pops(n, h) else h.call("add_items", s, _items(n)),
                   size=lambda n: 200 if _pops(n) else sum(len(i["content"]) + 40 for i in _items(n))),
}


# --- the child ---------------------------------------------------------------------------


def crash_child(made: Callable[..., Any], fifo: str, kind: str, fixtures: dict[str, Any], session: str,
                first: int, limit_before: int | None, limit_offset: int, timeout: float) -> None:
    """In a forked child: open the store with ``made`` (the reopen factory) and make
    call after call of ``kind`` from number ``first``, recording each; before call
    ``limit_before`` (if given) limit file sizes to ``limit_offset`` bytes past the
    largest file under the data's directories; each call has the run's deadline,
    ``timeout``. Never returns until killed."""
    fd = os.open(fifo, os.O_WRONLY)
    # Past the file size limit (_limit_file_size) the kernel's SIGXFSZ kills the child, as a
    # crash would; Python ignores it (a write only fails). Set here: only the main thread can.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    work = _KINDS[kind]
    n = first
    doing = "opening"  # then "calls", then "closing": what an error escaping here interrupted
    try:
        with stops.watching(stops.Watch(timeout), interrupts=False), \
                open_target("crash", made, None, fixtures, PROFILES["fast"], 0, "crash") as t:
            record(fd, "R", n)
            doing = "calls"

            def calls() -> None:
                nonlocal n
                while True:
                    call = work.call(t.store, session, n)
                    if n == limit_before:
                        _limit_file_size(fixtures, limit_offset)
                    record(fd, "B", n)
                    try:
                        result = t.run(call)
                    except OutcomeUnknown as exc:
                        record(fd, "U", n, steers=list(getattr(exc, "steers", []) or [])[:50])
                        return
                    except Exception as exc:
                        record(fd, "E", n, error=describe_exception(exc)[:600])
                        return
                    record(fd, "A", n, **work.ack(n, result))
                    n += 1

            t.supervised(calls)  # made as a clause makes them, on a thread of its own
            doing = "closing"
    except BaseException as exc:  # said to the parent: opening or closing the store failed, or call n stuck
        cause = exc.error if isinstance(exc, FactoryError) else exc
        record(fd, "E", n, error=describe_exception(cause)[:600], doing=doing)
    time.sleep(START_TIMEOUT)  # and wait to be killed


def _limit_file_size(fixtures: dict[str, Any], offset: int) -> None:
    # The file written last is the one the next call most likely extends.
    latest = (0.0, 0)
    for value in fixtures.values():
        if isinstance(value, Path) and value.is_dir():
            for root, _, files in os.walk(value):
                for name in files:
                    try:
                        st = os.stat(os.path.join(root, name))
                    except OSError:
                        continue
                    latest = max(latest, (st.st_mtime, st.st_size))
    largest = latest[1]
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (largest + offset, hard))


# --- the parent --------------------------------------------------------------------------


@dataclass
class _Run:
    """One crash clause's lives: the kills, the figures, the state the next life starts from."""

    t: Target
    kind: str
    session: str
    figures: Counter[str] = field(default_factory=Counter)
    durations: list[float] = field(default_factory=list)
    next: int = 0
    lives: int = 0

    @property
    def locations(self) -> dict[str, Any]:
        """What ``reopen``'s parameters get: the values the factory got by those names."""
        assert self.t.reopen is not None
        return {n: self.t.fixtures[n] for n in parameter_names(self.t.reopen) if n in self.t.fixtures}

    @property
    def directory(self) -> bool:
        return any(isinstance(v, Path) and v.is_dir() for v in self.locations.values())

    def life(self, zygote: Zygote, rng: random.Random, key: int = 0) -> Life:
        """Run one child until it dies; what it did."""
        first = self.next
        target = first + rng.randint(0, _MOST_BEFORE)
        by_limit = self.directory and rng.random() < 0.5
        size = max(2, _KINDS[self.kind].size(target))
        # Half the cuts anywhere in the call's bytes, half near their end, where its
        # last record ends (a torn last line is the classic state a crash leaves).
        offset = rng.randint(1, size) if rng.random() < 0.5 else size - rng.randint(1, max(1, size // 8))
        estimate = statistics.median(self.durations[-20:]) if self.durations else 0.01
        args = (self.kind, self.locations, self.session, first, target if by_limit else None, offset,
                stops.current().timeout)
        with zygote.child(_WORK, args, key) as child:
            if child.wait_for("R", first, START_TIMEOUT) is not None:
                begun = child.wait_for("B", target, 5 + 20 * estimate * (target - first + 1))
                if begun is not None:
                    if by_limit:
                        child.wait_for_death(0.05 + 3 * estimate)
                    else:
                        time.sleep(rng.uniform(0, 1.5 * estimate))
        life = child.life
        for r in life.acked():
            began, ended = child.seen.get(("B", r["n"])), child.seen.get(("A", r["n"]))
            if began is not None and ended is not None:
                self.durations.append(ended - began)
        numbers = [r["n"] for r in life.records if r["k"] in ("B", "A")]
        self.next = max([first - 1, *numbers]) + 1
        if self.kind == "checkpoints":  # each life starts with a put: its writes go to a checkpoint it put
            self.next = -(-self.next // 3) * 3
        self.lives += 1
        self.figures["kills"] += 1
        self.figures[f"deaths by {life.death}"] += 1
        self.figures["calls acknowledged"] += len(life.acked())
        return life


#: What a child was doing when an error it recorded outside a call came.
_DOING: Final = {"opening": "opening the data with reopen", "closing": "closing the store (reopen's teardown)"}


def _crash_clause(t: Target, fn: Callable[..., None], kind: str,
                  judge: Callable[[Check, _Run, Target, Life, int], None]) -> None:
    """Kill children of ``kind`` until the profile's bound; ``judge`` each life on a
    store the parent opened with ``reopen``."""
    assert t.reopen is not None, "a crash clause runs only with reopen="
    from storetest._engine.backends import shared_connections, spawn_reference

    run = _Run(t, kind, t.new_session(f"crash-{kind}"))
    rng = random.Random(f"{t.seed}:{fn.__name__}")
    started = time.monotonic()
    with checking(fn, t.run) as check:
        try:
            pickle.dumps(run.locations)
        except Exception as exc:
            check.add(run.session, f"reopen's parameters got values a child process cannot receive "
                      f"({describe_exception(exc)}): give reopen the data's location (a path, a URL, a "
                      "prefix), not a live object such as a pool or a connection")
            return
        # Forked by the fork server holding reopen itself, else by a zygote spawned to import it.
        zygote, key = forking.server_for(t.reopen) or (Zygote.shared(spawn_reference(t.reopen, "reopen factory")), 0)
        try:
            for k in range(t.profile.crash_kills):
                if time.monotonic() - started > t.profile.crash_seconds:
                    run.figures["stopped by the time bound"] = 1
                    break
                life = run.life(zygote, rng, key)
                t.tick()
                for error in life.errors()[:1]:
                    what = _DOING.get(error.get("doing", ""), f"call #{error['n']}")
                    check.add(run.session, f"in the child process, {what} raised {error['error']} "
                              f"({f'after {k} kills' if k else 'before any kill'}; nothing else was running)"
                              + shared_connections(t.reopen))
                try:
                    with open_target(t.clause, t.reopen, None, t.fixtures, t.profile, t.seed, t.nonce,
                                     t.tag) as reopened:
                        judge(check, run, reopened, life, k)
                except FactoryError as exc:
                    check.add(run.session, f"after kill {k + 1}, opening the data with reopen in this process "
                              f"failed: {describe_exception(exc.error)}")
                if check.violations:
                    break
        finally:
            t.findings.append(_figures(run, time.monotonic() - started))
        if check.violations:
            check.add(run.session, "figures: " + _figures(run, time.monotonic() - started))


def _figures(run: _Run, seconds: float) -> str:
    shown = ", ".join(f"{k} {v}" for k, v in run.figures.items() if k != "kills")
    return f"{run.figures['kills']} kills in {seconds:.1f} s: {shown}"


def _call(check: Check, r: Target, session: str, what: str, work: Coroutine[Any, Any, Any]) -> Any:
    try:
        return r.run(work)
    except Exception as exc:
        check.add(session, f"after a kill, {what} raised {describe_exception(exc)}")
        return _RAISED


_RAISED: Final = object()


def _in_flight(life: Life) -> int | None:
    flight = life.in_flight()
    return None if flight is None else int(flight["n"])


# --- transcripts -------------------------------------------------------------------------


@dataclass
class _Saved:
    current: int = -1  # the save the parent last read back (-1: empty)


def _judge_saves(check: Check, run: _Run, r: Target, life: Life, k: int) -> None:
    state: _Saved = run.__dict__.setdefault("saved", _Saved())
    session = run.session
    acked = [int(a["n"]) for a in life.acked()]
    before = acked[-1] if acked else state.current
    flight = _in_flight(life)
    got = _call(check, r, session, "messages()", r.store.messages(session))
    if got is _RAISED:
        return
    which = _save_number(got)
    allowed = {before, *(() if flight is None else (flight,))}
    if (which == -1 and any(not _transcript(a) for a in allowed if a >= 0)) or which in allowed:
        if flight is not None and which == flight and flight != before:
            run.figures["saves in flight that landed"] += 1
        elif flight is not None:
            run.figures["saves in flight that did not land"] += 1
    elif which is None:
        check.add(session, f"after a kill, the transcript is no save's: {len(got)} message(s), a save "
                  "landed in part (old or new, never a mix)", expected=_texts(_transcript(before)), got=_texts(got))
        return
    elif which in acked[:-1] or which == state.current:
        check.add(session, f"an acknowledged save is missing after a kill: the transcript is an earlier "
                  f"save's (#{which}), not that of save #{before}, which had returned", expected=f"save #{before}",
                  got=f"save #{which}")
        return
    elif which == -1:
        check.add(session, f"after a kill, the transcript is empty, though save #{before} had returned: a save "
                  "landed in part (its delete committed before its inserts)", expected=_texts(_transcript(before)),
                  got=[])
        return
    else:
        check.add(session, f"after a kill, the transcript is save #{which}'s, neither the last acknowledged "
                  f"(#{before}) nor the one in flight ({flight})", expected=f"save #{before}", got=f"save #{which}")
        return
    mine = 1_000_000 + 2 * k + (1 if (1_000_000 + 2 * k) % 11 == 5 else 0)
    if _call(check, r, session, "the next save()", r.store.save(session, _transcript(mine))) is _RAISED:
        return
    back = _call(check, r, session, "messages()", r.store.messages(session))
    if back is not _RAISED and _save_number(back) != mine:
        check.add(session, "the first save after a kill did not land whole", _texts(_transcript(mine)),
                  _texts(back))
    state.current = mine


def _texts(messages: object) -> object:
    if not isinstance(messages, list):
        return messages
    return [shorten(p.text, 40) for m in messages if isinstance(m, Message) for p in m.content
            if isinstance(p, Text)]


@clause(needs=("transcript",), reopen=True)
def saves_survive_a_crash(t: Target) -> None:
    """A process killed while it saves leaves, for the next process to open, the last
    acknowledged transcript or the one being saved, never a mix, and the next save works.

    Catches a save written as a delete and inserts in autocommit (killed in between:
    an empty or half transcript), a transcript file rewritten in place rather than
    replaced, a save acknowledged before it is written (a write-back cache).
    """
    _crash_clause(t, saves_survive_a_crash, "transcript", _judge_saves)


# --- steers ------------------------------------------------------------------------------


@dataclass
class _Queue:
    taken: set[str] = field(default_factory=set)


def _judge_steers(check: Check, run: _Run, r: Target, life: Life, k: int) -> None:
    state: _Queue = run.__dict__.setdefault("queue", _Queue())
    session = run.session
    queued: list[str] = []  # the parent drained the queue after the last kill
    for a in life.acked():
        n = int(a["n"])
        if _takes(n):
            if a["s"] != queued:
                check.add(session, f"take_steers() #{n} returned {shorten(a['s'])}, the queue held "
                          f"{shorten(queued)}", expected=queued, got=a["s"])
                return
            state.taken.update(a["s"])
            queued = []
        else:
            queued.append(_steer(n))
    flight = _in_flight(life)
    allowed = [queued]
    if flight is not None:
        allowed.append([] if _takes(flight) else [*queued, _steer(flight)])
    drained = _call(check, r, session, "take_steers()", r.store.take_steers(session))
    if drained is _RAISED:
        return
    back = [s for s in drained if s in state.taken]
    if back:
        check.add(session, f"a taken steer came back after a kill: {shorten(back)} had been returned by an "
                  "acknowledged take_steers() and were queued again (the take returned before its delete "
                  "was durable)", expected=[], got=back)
        return
    if drained not in allowed:
        lost = [s for s in queued if s not in drained]
        if flight is not None and _takes(flight) and drained and lost:
            what = (f"a take killed in flight removed part of the queue: {len(lost)} of {len(queued)} steers "
                    "gone, the rest still queued (the take must remove all it returns, atomically)")
        elif lost:
            what = f"{len(lost)} acknowledged steer(s) lost after a kill ({shorten(lost)})"
        else:
            what = "after a kill the queue held steers never added, or out of order"
        check.add(session, what, expected=queued, got=drained)
        return
    if flight is not None and _takes(flight) and queued:
        run.figures["takes in flight that removed the queue" if drained == [] else
                    "takes in flight that did not land"] += 1
    mine = f"after kill {k}"
    if _call(check, r, session, "the next add_steer()", r.store.add_steer(session, mine)) is _RAISED:
        return
    again = _call(check, r, session, "take_steers()", r.store.take_steers(session))
    if again is not _RAISED and again != [mine]:
        check.add(session, "the first add_steer() after a kill did not come back alone", [mine], again)


@clause(needs=("steers",), reopen=True)
def steers_survive_a_crash(t: Target) -> None:
    """A process killed while it adds and takes steers leaves every acknowledged steer
    queued or taken by an acknowledged take; a taken steer never comes back (unless
    ``OutcomeUnknown`` said it might), a take killed in flight took all or nothing,
    and the next add works.

    Catches a take that returns before its delete commits, a take that deletes steer
    by steer, an add acknowledged before it is written.
    """
    _crash_clause(t, steers_survive_a_crash, "steers", _judge_steers)


# --- entry logs --------------------------------------------------------------------------


@dataclass
class _Log:
    verified: list[Entry] = field(default_factory=list)


def _batch_of(entry_id: str) -> tuple[int, int, int] | None:
    match = re.fullmatch(r"b(\d+)-(\d+)of(\d+)", entry_id)
    return None if match is None else (int(match.group(1)), int(match.group(2)), int(match.group(3)))


def _judge_log(check: Check, run: _Run, r: Target, life: Life, k: int) -> None:
    state: _Log = run.__dict__.setdefault("log", _Log())
    session = run.session
    got = _call(check, r, session, "entries()", r.store.call("entries", session))
    if got is _RAISED:
        return
    acked = [int(a["n"]) for a in life.acked()]
    flight = _in_flight(life)
    want = state.verified + [e for n in acked for e in _batch(n)]
    if got == want:
        if flight is not None:
            run.figures["batches in flight that did not land"] += 1
    elif flight is not None and got == want + _batch(flight):
        run.figures["batches in flight that landed whole"] += 1
    else:
        check.add(session, _describe_log_crash(state.verified, acked, flight, got),
                  expected=[e.id for e in want], got=[getattr(e, "id", e) for e in got])
        return
    mine = [Entry.message(f"after-kill-{k}", None, T0, Message.text("user", f"appended after kill {k}"))]
    if _call(check, r, session, "the next append()", r.store.call("append", session, mine)) is _RAISED:
        return
    back = _call(check, r, session, "entries()", r.store.call("entries", session))
    if back is not _RAISED and back != got + mine:
        check.add(session, "the first append after a kill did not land as appended: "
                  + describe_log(got + mine, back), expected=[e.id for e in got + mine],
                  got=[getattr(e, "id", e) for e in back])
    state.verified = got + mine
    if (k + 1) % _LIVES_PER_SESSION == 0:
        run.session, state.verified = run.t.new_session("crash-log"), []  # a new log: reads stay small


def _describe_log_crash(verified: list[Entry], acked: list[int], flight: int | None, got: list[Any]) -> str:
    if got[: len(verified)] != verified:
        return "entries that were there before the kill changed or vanished: " + describe_log(
            verified, got[: len(verified)])
    rest = got[len(verified):]
    seen: dict[int, list[int]] = {}
    sizes: dict[int, int] = {}
    for e in rest:
        where = _batch_of(getattr(e, "id", ""))
        if where is None:
            return f"after a kill the log holds an entry never appended: {shorten(e)}"
        n, i, size = where
        if i < size and e != _batch(n)[i]:
            return (f"entry {e.id!r} came back changed after a kill: a line written in part was read as an "
                    "entry (a torn last line parsed or repaired, not dropped): " + describe_log([_batch(n)[i]], [e]))
        seen.setdefault(n, []).append(i)
        sizes[n] = size
    for n, indexes in seen.items():
        if indexes != list(range(sizes[n])):
            return (f"batch {n} is in part after a kill: {len(indexes)} of its {sizes[n]} entries "
                    f"({'acknowledged' if n in acked else 'in flight'}); a batch is whole or absent")
    missing = [n for n in acked if n not in seen]
    if missing:
        return (f"{len(missing)} acknowledged batch(es) missing after a kill (#{missing[0]}: append() had returned, "
                "so it must be there)")
    return "after a kill the log's batches are out of order: " + describe_log(
        verified + [e for n in acked for e in _batch(n)], got)


@clause(needs=("log",), reopen=True)
def log_appends_survive_a_crash(t: Target) -> None:
    """A process killed while it appends leaves, for the next process to open, every
    acknowledged batch whole, no batch in part and no entry changed, and the next
    append works (after whatever torn tail the kill left).

    Catches a JSONL reader that parses or repairs a torn last line, one that skips a
    bad line in the middle, a torn tail left for the next append to glue onto, a batch
    committed row by row, an append acknowledged before it is written.
    """
    _crash_clause(t, log_appends_survive_a_crash, "log", _judge_log)


# --- item histories ----------------------------------------------------------------------


@dataclass
class _History:
    verified: list[Any] = field(default_factory=list)


def _judge_items(check: Check, run: _Run, r: Target, life: Life, k: int) -> None:
    state: _History = run.__dict__.setdefault("history", _History())
    session = run.session
    got = _call(check, r, session, "get_items()", r.store.call("get_items", session, None))
    if got is _RAISED:
        return
    model = list(state.verified)
    for a in life.acked():
        n = int(a["n"])
        if _pops(n, r.store):
            model = model[:-1]
        else:
            model += _items(n)
    flight = _in_flight(life)
    other = None if flight is None else (model[:-1] if _pops(flight, r.store) else model + _items(flight))
    if same_items(model, got):
        if flight is not None:
            run.figures["calls in flight that did not land"] += 1
    elif other is not None and same_items(other, got):
        run.figures["calls in flight that landed whole"] += 1
    elif flight is not None and not _pops(flight) and not protocol(r).atomic_batches and any(
            same_items(model + _items(flight)[:i], got) for i in range(1, len(_items(flight)))):
        # A protocol that adds one message at a time (a LlamaIndex chat store): the batch's first messages.
        run.figures["batches in flight that landed in part, message by message"] += 1
    else:
        names = [str(i.get("content", ""))[:14] if isinstance(i, dict) else i for i in got] \
            if isinstance(got, list) else got
        check.add(session, "after a kill the history is neither what was acknowledged nor that plus the call "
                  "in flight: a batch in part, an item changed, or an acknowledged call missing",
                  expected=[str(i["content"])[:14] for i in model], got=names)
        return
    mine = [{"role": "user", "content": f"added after kill {k}"}]
    if _call(check, r, session, "the next add_items()", r.store.call("add_items", session, mine)) is _RAISED:
        return
    back = _call(check, r, session, "get_items()", r.store.call("get_items", session, None))
    if back is not _RAISED and not same_items(got + mine, back):
        check.add(session, "the first add_items() after a kill did not land as added",
                  expected=f"{len(got) + 1} items", got=f"{len(back)} items" if isinstance(back, list) else back)
    state.verified = got + mine
    if (k + 1) % _LIVES_PER_SESSION == 0:
        run.session, state.verified = run.t.new_session("crash-items"), []


@clause(needs=("items",), reopen=True)
def items_survive_a_crash(t: Target) -> None:
    """A process killed while it adds and pops items leaves, for the next process to
    open, every acknowledged call's effect, the call in flight whole or absent (a
    batch never in part), and the next add works.

    Catches a batch inserted item by item in autocommit, a pop that returns before its
    delete commits, an add acknowledged before it is written.
    """
    _crash_clause(t, items_survive_a_crash, "items", _judge_items)


# --- checkpointers -----------------------------------------------------------------------


@dataclass
class _Checkpoints:
    #: Put number -> the put_writes numbers seen landed on it, of the thread judged now.
    puts: dict[int, set[int]] = field(default_factory=dict)
    #: Calls killed in flight and not seen landed: they may still land, whole.
    unsettled: set[int] = field(default_factory=set)


def _checkpoint_difference(session: str, n: int, writes: set[int], got: dict[str, Any]) -> str | None:
    cp = got.get("checkpoint") if isinstance(got.get("checkpoint"), dict) else {}
    values = (cp or {}).get("channel_values")
    if values != _checkpoint_values(n):
        return (f"checkpoint #{n} came back with other channel values after a kill (channels "
                f"{sorted(values or {})}, sent {sorted(_checkpoint_values(n))}): a put landed in part")
    parent = (got.get("parent") or {}).get("checkpoint_id")
    if parent != (_checkpoint_id(session, n - 3) if n >= 3 else None):
        return f"checkpoint #{n}'s parent_config changed after a kill (it names {parent!r})"
    if (got.get("metadata") or {}).get("step") != n:
        return f"checkpoint #{n}'s metadata changed after a kill: {shorten(got.get('metadata'))}"
    want = [[f"task {w}", channel, value] for w in sorted(writes) for channel, value in _checkpoint_writes(w)]
    back = [list(w) for w in got.get("writes") or []]
    if back != want:
        tasks = {str(w[0]) for w in back if w}
        for w in sorted(writes):
            count = sum(1 for x in back if x and x[0] == f"task {w}")
            if 0 < count < len(_checkpoint_writes(w)):
                return (f"put_writes() #{w} is in part after a kill: {count} of its {len(_checkpoint_writes(w))} "
                        "writes (a task's writes land together or not at all)")
        lost = [w for w in sorted(writes) if f"task {w}" not in tasks]
        if lost:
            return (f"{len(lost)} acknowledged put_writes() missing after a kill (#{lost[0]} on checkpoint #{n}: "
                    "put_writes() had returned, so its writes must be there)")
        return f"checkpoint #{n}'s pending writes changed after a kill"
    return None


def _judge_checkpoints(check: Check, run: _Run, r: Target, life: Life, k: int) -> None:
    state: _Checkpoints = run.__dict__.setdefault("checkpoints", _Checkpoints())
    session = run.session
    model = {p: set(w) for p, w in state.puts.items()}
    for a in life.acked():
        n = int(a["n"])
        if n % 3 == 0:
            model[n] = set()
        else:
            model.setdefault(n - n % 3, set()).add(n)
    flight = _in_flight(life)
    # Calls whose outcome is unknown: this life's in flight, and earlier ones not seen landed (a
    # database server may finish a dead client's statement after the parent has looked).
    unsettled = state.unsettled | ({flight} if flight is not None else set())
    got = _call(check, r, session, "list()", r.store.call("list_checkpoints", session, ""))
    if got is _RAISED:
        return
    by_id = {_checkpoint_id(session, p): p for p in [*model, *(u for u in unsettled if u % 3 == 0)]}
    found: dict[int, dict[str, Any]] = {}
    for item in got:
        p = by_id.get(str(item.get("id"))) if isinstance(item, dict) else None
        if p is None:
            check.add(session, f"after a kill, list() gives a checkpoint never put: {shorten(item)}")
            return
        found[p] = item
    missing = [p for p in model if p not in found]
    if missing:
        check.add(session, f"{len(missing)} acknowledged checkpoint(s) missing after a kill (put() #{missing[0]} had "
                  "returned, so it must be there)", expected=sorted(model), got=sorted(found))
        return
    if [x.get("id") for x in got] != sorted((x.get("id") for x in got), reverse=True):
        check.add(session, "after a kill, list() is not newest first", got=[x.get("id") for x in got])
        return
    landed = {p for p in found if p not in model}
    if flight is not None and flight % 3 == 0:
        run.figures["puts in flight that landed whole" if flight in found else "puts in flight that did not land"] += 1
    for p in landed:
        model[p] = set()
    for p, item in sorted(found.items()):
        writes = set(model[p])
        tasks = {str(w[0]) for w in item.get("writes") or [] if w}
        for u in sorted(unsettled):
            if u % 3 and u - u % 3 == p and f"task {u}" in tasks:
                writes.add(u)
                landed.add(u)
        found_difference = _checkpoint_difference(session, p, writes, item)
        if found_difference:
            check.add(session, found_difference)
            return
        model[p] = writes
    if flight is not None and flight % 3:
        run.figures["writes in flight that landed whole" if flight in landed else
                    "writes in flight that did not land"] += 1
    late = landed - {flight}
    if late:
        run.figures["calls that landed after the parent looked"] += len(late)
    mine = 3 * (1_000_000 + k)
    if _call(check, r, session, "the next put()", _checkpoint_call(r.store, session, mine)) is _RAISED or \
            _call(check, r, session, "the next put_writes()", _checkpoint_call(r.store, session, mine + 1)) is _RAISED:
        return
    back = _call(check, r, session, "get_tuple()", r.store.call("get_checkpoint", session, "", None))
    if back is _RAISED:
        return
    if not isinstance(back, dict) or back.get("id") != _checkpoint_id(session, mine):
        check.add(session, "the first put after a kill is not the thread's latest checkpoint",
                  expected=_checkpoint_id(session, mine), got=back.get("id") if isinstance(back, dict) else back)
        return
    wrong = _checkpoint_difference(session, mine, {mine + 1}, back)
    if wrong:
        check.add(session, f"the first put and put_writes after a kill did not land whole: {wrong}")
        return
    model[mine] = {mine + 1}
    state.puts, state.unsettled = model, unsettled - landed
    if (k + 1) % _LIVES_PER_SESSION == 0:
        run.session, state.puts, state.unsettled = run.t.new_session("crash-checkpoints"), {}, set()


@clause(needs=("checkpoints",), reopen=True)
def checkpoints_survive_a_crash(t: Target) -> None:
    """A process killed while it puts checkpoints and their pending writes leaves, for
    the next process to open, every acknowledged checkpoint whole (its values, parent
    and metadata) and every acknowledged ``put_writes`` there; the call in flight has
    landed whole or not at all (a checkpoint without its values, or some of a task's
    writes, never); the next put and write work.

    Catches writes acknowledged before they are written (a write-behind buffer, a file
    saved at close), a checkpoint written in steps (its row, then its blobs), a file
    rewritten in place that a kill leaves torn.
    """
    _crash_clause(t, checkpoints_survive_a_crash, "checkpoints", _judge_checkpoints)
