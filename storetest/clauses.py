"""The clauses of the contract, one function each.

A clause takes a :class:`~storetest._harness.Target` (the store under test, maybe a
replica handle, an event loop) and raises :class:`ConformanceFailure` describing every
violation it saw. Its docstring's first line is what it promises; the rest names the
real bugs it exists to catch. ``CLAUSES`` lists them in the order they run.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hypothesis import given, note, seed
from hypothesis import strategies as st

from storetest import strategies
from storetest._harness import Handle, Target, gather_all
from storetest.contract import MAX_SESSION_ID_BYTES, Message, Text, ToolCall, ToolResult
from storetest.diagnosis import (
    describe_id_merge,
    describe_steers,
    describe_text,
    describe_transcript,
    shorten,
)

__all__ = ["CLAUSES", "NEEDS_REPLICA", "ConformanceFailure", "Violation", "conformance_failures"]

_MAX_SHOWN = 10


@dataclass(frozen=True)
class Violation:
    """One thing a store got wrong: where, what kind of corruption, what went in and out."""

    session: str
    diagnosis: str
    sent: str = ""
    got: str = ""

    def lines(self) -> list[str]:
        out = [f"session {self.session!r}: {self.diagnosis}"]
        if self.sent or self.got:
            out += [f"    sent: {self.sent}", f"    got:  {self.got}"]
        return out


class ConformanceFailure(AssertionError):
    """A store broke a clause of the contract. ``diagnosis`` is the one-line summary the
    report shows; ``violations`` has every problem the clause saw."""

    def __init__(self, clause: str, violations: Sequence[Violation], what: str = "") -> None:
        self.clause = clause
        self.violations = list(violations)
        self.diagnosis = self.violations[0].diagnosis if self.violations else "failed"
        lines = [f"{clause}: {len(self.violations)} violation(s)"]
        for v in self.violations[:_MAX_SHOWN]:
            lines += ["  " + line for line in v.lines()]
        if len(self.violations) > _MAX_SHOWN:
            lines.append(f"  ... and {len(self.violations) - _MAX_SHOWN} more")
        if what:
            lines.append(f"the clause: {what}")
        super().__init__("\n".join(lines))


def conformance_failures(error: BaseException) -> list[ConformanceFailure]:
    """Every :class:`ConformanceFailure` in ``error``, looking inside exception groups
    (Hypothesis raises one when an example fails in more than one way)."""
    if isinstance(error, ConformanceFailure):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [f for inner in error.exceptions for f in conformance_failures(inner)]
    return []


class _Check:
    """Collects violations; raises them all at once, like fstest."""

    def __init__(self, t: Target, clause: Callable[..., Any]) -> None:
        self.t = t
        self.clause = clause
        self.violations: list[Violation] = []

    def add(self, session: str, diagnosis: str, sent: object = None, got: object = None) -> None:
        self.violations.append(
            Violation(
                session,
                diagnosis,
                "" if sent is None else shorten(sent, 300),
                "" if got is None else shorten(got, 300),
            )
        )

    def transcript(
        self, session: str, sent: Sequence[Message], got: object, previous: Sequence[Message] = ()
    ) -> None:
        if not isinstance(got, list):
            self.add(session, f"messages() returned {type(got).__name__}, not a list", got=got)
        elif got != list(sent):
            self.add(session, describe_transcript(sent, got, previous), sent, got)

    def steers(self, session: str, sent: Sequence[str], got: object) -> None:
        if not isinstance(got, list):
            self.add(session, f"take_steers() returned {type(got).__name__}, not a list", got=got)
        elif got != list(sent):
            self.add(session, describe_steers(sent, got), sent, got)

    def raise_if_any(self) -> None:
        if self.violations:
            what = " ".join((self.clause.__doc__ or "").strip().split("\n\n")[0].split())
            raise ConformanceFailure(self.clause.__name__, self.violations, what)


@contextmanager
def _checking(t: Target, clause: Callable[..., Any]) -> Iterator[_Check]:
    check = _Check(t, clause)
    yield check
    check.raise_if_any()


def _examples(t: Target, *strategies_: st.SearchStrategy[Any], scale: float = 1.0) -> Callable[
    [Callable[..., None]], Callable[[], None]
]:
    """Turn a function of generated values into a Hypothesis test, seeded and set up for
    this run (``scale`` shrinks the example count for expensive examples)."""
    settings = t.settings
    if scale != 1.0:
        settings = type(settings)(settings, max_examples=max(2, int(settings.max_examples * scale)))

    def decorate(fn: Callable[..., None]) -> Callable[[], None]:
        return seed(t.seed)(settings(given(*strategies_)(fn)))

    return decorate


def _rounds(t: Target, base: int) -> int:
    """How many rounds a concurrency clause runs: more under slower, thorough profiles."""
    return max(1, round(base * int(t.settings.max_examples) / 20))


def _texts(n: int, label: str) -> list[Message]:
    return [Message.text("user" if i % 2 == 0 else "assistant", f"{label} #{i}") for i in range(n)]


# --- 1-6: what goes in comes out -------------------------------------------------------


def transcript_round_trips_exactly(t: Target) -> None:
    """A saved transcript comes back equal, field by field and byte for byte.

    Catches text normalized to NFC, trailing whitespace stripped, CRLF turned into LF,
    NUL dropped, emoji mangled by a 3-byte charset, attachment bytes decoded as text.
    """

    # Every known-troublesome text in every place text goes, before anything random,
    # so a normalizing store is caught on every run, not on a lucky draw.
    corpus = [
        Message("user", (Text(text), ToolResult(f"call_{i}", text), ToolCall(text, text, "{}")))
        for i, text in enumerate(strategies.NASTY_TEXTS)
    ] + [Message("user", (a,)) for a in strategies.NASTY_ATTACHMENTS]
    session = t.new_session("roundtrip")
    with _checking(t, transcript_round_trips_exactly) as check:
        t.run(t.store.save(session, corpus))
        got = t.run(t.store.messages(session))
        if isinstance(got, list) and len(got) == len(corpus):
            for sent_message, got_message in zip(corpus, got, strict=True):
                check.transcript(session, [sent_message], [got_message])
        else:
            check.transcript(session, corpus, got)

    @_examples(t, strategies.transcripts)
    def example(transcript: list[Message]) -> None:
        session = t.new_session("roundtrip")
        note(f"session {session!r}")
        with _checking(t, transcript_round_trips_exactly) as check:
            t.run(t.store.save(session, transcript))
            check.transcript(session, transcript, t.run(t.store.messages(session)))

    example()


def tool_arguments_are_kept_verbatim(t: Target) -> None:
    """Tool-call arguments come back byte for byte, valid JSON or not: a store never parses them.

    Catches the Postgres ``jsonb`` / MySQL ``JSON`` column (keys sorted, duplicate keys
    dropped, whitespace and numbers rewritten, escapes decoded), and a store that
    refuses or "repairs" the truncated JSON of a reply that was cut off.
    """
    session = t.new_session("arguments")
    corpus = [
        Message("assistant", (ToolCall(f"call_{i}", "lookup", args),))
        for i, args in enumerate(strategies.NASTY_ARGUMENTS)
    ]
    with _checking(t, tool_arguments_are_kept_verbatim) as check:
        t.run(t.store.save(session, corpus))
        got = t.run(t.store.messages(session))
        if not isinstance(got, list) or len(got) != len(corpus):
            check.transcript(session, corpus, got)
        else:
            for sent_message, got_message in zip(corpus, got, strict=True):
                check.transcript(session, [sent_message], [got_message])

    @_examples(t, strategies.tool_arguments)
    def example(arguments: str) -> None:
        session = t.new_session("arguments")
        note(f"session {session!r}")
        sent = [Message("assistant", (ToolCall("call_1", "lookup", arguments),))]
        with _checking(t, tool_arguments_are_kept_verbatim) as check:
            t.run(t.store.save(session, sent))
            check.transcript(session, sent, t.run(t.store.messages(session)))

    example()


def save_replaces_the_transcript(t: Target) -> None:
    """Each save makes the transcript exactly what was saved: longer, shorter, diverging
    at any position, identical, or empty.

    Catches a save that appends, one that ignores an empty list, and an incremental
    save that keeps a stale tail or misjudges the common prefix.
    """
    base = _texts(6, "base")
    steps = [
        base[:3],
        base,  # longer
        base[:2],  # shorter
        [*base[:2], Message.text("user", "diverges at 2")],
        [Message.text("system", "diverges at 0"), *base[1:3]],
        [Message.text("system", "diverges at 0"), *base[1:3]],  # identical
        [],
        base[:1],
        [Message.text("user", "replaced the only message")],
    ]
    session = t.new_session("replace")
    with _checking(t, save_replaces_the_transcript) as check:
        previous: list[Message] = []
        for step in steps:
            t.run(t.store.save(session, step))
            check.transcript(session, step, t.run(t.store.messages(session)), previous)
            previous = step

    @_examples(t, st.lists(strategies.transcripts, min_size=2, max_size=4), scale=0.5)
    def example(saves: list[list[Message]]) -> None:
        session = t.new_session("replace")
        note(f"session {session!r}")
        with _checking(t, save_replaces_the_transcript) as check:
            previous: list[Message] = []
            for transcript in saves:
                t.run(t.store.save(session, transcript))
                got = t.run(t.store.messages(session))
                check.transcript(session, transcript, got, previous)
                if check.violations:
                    break
                previous = transcript

    example()


def unknown_session_is_empty(t: Target) -> None:
    """A session never used has no messages and no steers: ``[]``, not an error or ``None``.

    Catches stores that raise "not found", return ``None``, or create rows on read.
    """
    session = t.new_session("never-used")
    with _checking(t, unknown_session_is_empty) as check:
        for handle in t.handles():
            check.transcript(session, [], t.run(handle.messages(session)))
            check.steers(session, [], t.run(handle.take_steers(session)))
        # Reading must not have created anything that a later read would trip over.
        check.transcript(session, [], t.run(t.store.messages(session)))


def _confusable_ids(prefix: str) -> list[str]:
    room = MAX_SESSION_ID_BYTES - len(prefix.encode()) - 1
    return [
        f"{prefix}{suffix}"
        for suffix in (
            "a", "A", "a ", "a  ", " a", "e", "E", "é", "e\u0301", "É", "ß", "ss",
            "%", "_", "a%", "a_", "ab", "abc", "日本", "日本語", "a\x00b", "a\x00c",
            "x" * 64 + "1", "x" * 64 + "2",
            "y" * (room - 1) + "1", "y" * (room - 1) + "2",
            "é" * (room // 2 - 1) + "1", "é" * (room // 2 - 1) + "2",
        )
    ]


def sessions_are_isolated(t: Target) -> None:
    """Sessions never see each other's transcripts or steers, however alike their ids.

    Ids differ here only by case, trailing spaces, NFC vs NFD, an accent, SQL wildcards
    (``%``, ``_``), a prefix, a NUL, or past the 64th character, and run to the
    512-byte limit. Catches case- and accent-insensitive collations, PAD SPACE
    comparison, ``LIKE`` matching, truncated or hashed keys.
    """
    prefix = t.new_session("iso-")
    ids = _confusable_ids(prefix)
    _check_isolation(t, ids, sessions_are_isolated)

    @_examples(t, st.lists(strategies.texts.filter(bool), min_size=2, max_size=4, unique=True), scale=0.5)
    def example(suffixes: list[str]) -> None:
        prefix = t.new_session("iso-")
        ids = [prefix + s for s in suffixes]
        note(f"sessions {ids!r}")
        _check_isolation(t, ids, sessions_are_isolated)

    example()


def _check_isolation(t: Target, ids: Sequence[str], clause: Callable[..., Any]) -> None:
    owner = {f"saved to session #{i}": i for i in range(len(ids))}
    for i, session in enumerate(ids):
        t.run(t.store.save(session, [Message.text("user", f"saved to session #{i}")]))
        t.run(t.store.add_steer(session, f"steer for session #{i}"))
    with _checking(t, clause) as check:
        merged: set[tuple[int, int]] = set()
        for i, session in enumerate(ids):
            got = t.run(t.store.messages(session))
            want = [Message.text("user", f"saved to session #{i}")]
            if got == want:
                continue
            texts = [p.text for m in got if isinstance(m, Message) for p in m.content if isinstance(p, Text)]
            others = [owner[x] for x in texts if x in owner and owner[x] != i]
            if others:
                j = others[0]
                merged.add((min(i, j), max(i, j)))
                check.add(
                    session,
                    f"sessions merged: reading {session!r} gave the transcript saved to {ids[j]!r}: "
                    + describe_id_merge(session, ids[j]),
                )
            else:
                check.transcript(session, want, got)
        for i, session in enumerate(ids):
            got_steers = t.run(t.store.take_steers(session))
            want_steers = [f"steer for session #{i}"]
            if got_steers == want_steers:
                continue
            stolen = [
                int(s.rsplit("#", 1)[1]) for s in got_steers
                if isinstance(s, str) and s.startswith("steer for session #") and s != want_steers[0]
            ]
            if stolen:
                j = stolen[0]
                if (min(i, j), max(i, j)) not in merged:
                    check.add(
                        session,
                        f"sessions merged: taking steers for {session!r} returned the steer left for "
                        f"{ids[j]!r}: " + describe_id_merge(session, ids[j]),
                    )
            elif not any((min(i, j), max(i, j)) in merged for j in range(len(ids))):
                check.steers(session, want_steers, got_steers)


def stored_data_is_not_aliased(t: Target) -> None:
    """Changing the list passed to ``save`` or returned by ``messages``/``take_steers``
    changes nothing stored.

    Catches an in-memory store that keeps the caller's list, or hands out its own.
    """
    session = t.new_session("alias")
    original = _texts(3, "original")
    with _checking(t, stored_data_is_not_aliased) as check:
        passed = list(original)
        t.run(t.store.save(session, passed))
        passed.append(Message.text("user", "appended to the caller's list after save"))
        passed.pop(0)
        got = t.run(t.store.messages(session))
        if got != original:
            check.add(session, "the store kept the list passed to save: changing it afterwards "
                      "changed the stored transcript", original, got)
        else:
            got.append(Message.text("user", "appended to the list messages() returned"))
            got.clear()
            again = t.run(t.store.messages(session))
            if again != original:
                check.add(session, "messages() returned the store's own list: clearing it emptied "
                          "the stored transcript", original, again)
        t.run(t.store.add_steer(session, "first"))
        taken = t.run(t.store.take_steers(session))
        if isinstance(taken, list):
            taken.append("appended to the list take_steers() returned")
        t.run(t.store.add_steer(session, "second"))
        check.steers(session, ["second"], t.run(t.store.take_steers(session)))


# --- 7-8: steers ----------------------------------------------------------------------


def steers_are_taken_in_order_exactly_once(t: Target) -> None:
    """Steers come back oldest first, each exactly once: a second take is empty,
    identical texts stay two steers, and the text is verbatim.

    Catches a queue that is last-in-first-out, sorted by a timestamp that ties (or by
    text), deduplicated like a set, or read without being deleted.
    """
    corpus = ["b", "a", "c", "a", "a", "10", "9", "1.0", "", " ", *strategies.NASTY_TEXTS]
    session = t.new_session("order")
    with _checking(t, steers_are_taken_in_order_exactly_once) as check:
        for text in corpus:
            t.run(t.store.add_steer(session, text))
        check.steers(session, corpus, t.run(t.store.take_steers(session)))
        second = t.run(t.store.take_steers(session))
        if second:
            check.add(session, "steers taken twice: the second take returned steers again "
                      "(the take read the queue but did not delete it)", [], second)

    @_examples(t, st.lists(st.lists(strategies.steer_texts, max_size=5), min_size=1, max_size=3))
    def example(batches: list[list[str]]) -> None:
        session = t.new_session("order")
        note(f"session {session!r}")
        with _checking(t, steers_are_taken_in_order_exactly_once) as check:
            for batch in batches:
                for text in batch:
                    t.run(t.store.add_steer(session, text))
                check.steers(session, batch, t.run(t.store.take_steers(session)))
                if check.violations:
                    return
            check.steers(session, [], t.run(t.store.take_steers(session)))

    example()


@dataclass
class _Take:
    handle: int
    taker: int
    started: float
    ended: float
    steers: list[str]


async def _race(
    handles: Sequence[Handle], session: str, rng: random.Random, adders: int, per_adder: int,
    takers: int, prefill: int,
) -> tuple[list[str], list[_Take]]:
    """Prefill a queue, then start takers and adders at once; return what was added
    (acknowledged) and every take with its start and end times."""
    added: list[str] = []
    takes: list[_Take] = []
    for i in range(prefill):
        await handles[0].add_steer(session, f"p-{i}")
        added.append(f"p-{i}")
    done = asyncio.Event()
    start = asyncio.Event()

    async def adder(a: int) -> None:
        handle = handles[a % len(handles)]
        await start.wait()
        for i in range(per_adder):
            await handle.add_steer(session, f"a{a}-{i}")
            added.append(f"a{a}-{i}")
            if rng.random() < 0.5:
                await asyncio.sleep(0)

    async def taker(k: int) -> None:
        index = k % len(handles)
        await start.wait()
        while True:
            finished = done.is_set()
            began = time.monotonic()
            got = await handles[index].take_steers(session)
            takes.append(_Take(index, k, began, time.monotonic(), list(got)))
            if finished:
                return
            await asyncio.sleep(0)

    async def adders_then_done() -> None:
        await gather_all([adder(a) for a in range(adders)])
        done.set()

    tasks = [asyncio.ensure_future(taker(k)) for k in range(takers)]
    tasks.append(asyncio.ensure_future(adders_then_done()))
    await asyncio.sleep(0)
    start.set()
    await gather_all(tasks)
    # One final take after everything, so a steer still queued counts as taken late,
    # not as lost; a correct store returns nothing here.
    began = time.monotonic()
    takes.append(_Take(0, -1, began, time.monotonic(), list(await handles[0].take_steers(session))))
    return added, takes


def _account(check: _Check, session: str, added: list[str], takes: list[_Take]) -> None:
    """Jepsen's total-queue accounting, with duplicates and reordering counted as failures."""
    taken = Counter(s for take in takes for s in take.steers)
    want = Counter(added)
    lost = sorted(set(want) - set(taken))
    duplicated = sorted(s for s, n in taken.items() if n > 1)
    unexpected = sorted(set(taken) - set(want))
    if lost or duplicated or unexpected:
        parts = []
        if duplicated:
            parts.append(f"{len(duplicated)} steer(s) duplicated (handed to two takers: the take "
                         "reads and deletes without a lock)")
        if lost:
            parts.append(f"{len(lost)} steer(s) lost")
        if unexpected:
            parts.append(f"{len(unexpected)} steer(s) never added came back")
        check.add(
            session,
            ", ".join(parts) + f" [lost={len(lost)} duplicated={len(duplicated)} "
            f"unexpected={len(unexpected)} of {len(added)} added, {len(takes)} takes]",
            sent=f"duplicated: {duplicated[:5]} lost: {lost[:5]}",
            got=f"unexpected: {unexpected[:5]}",
        )
        return
    # Order: one adder's steers go in one after another, so a take that returns steer
    # i must not start after a take returning a later steer j of that adder has ended.
    where: dict[str, _Take] = {s: take for take in takes for s in take.steers}
    position = {s: i for take in takes for i, s in enumerate(take.steers)}
    series: dict[str, list[str]] = {}
    for s in added:
        series.setdefault(s.split("-")[0], []).append(s)
    for items in series.values():
        for earlier, later in itertools.pairwise(items):
            a, b = where[earlier], where[later]
            if (a is b and position[earlier] > position[later]) or (a is not b and a.started > b.ended):
                batch = a.steers if a is b else [*b.steers, "...", *a.steers]
                check.add(
                    session,
                    f"steers out of order: {later!r} was handed out before {earlier!r}, which was "
                    "added first",
                    sent=[s for s in items],
                    got=batch,
                )
                return


def steers_are_taken_exactly_once_under_concurrency(t: Target) -> None:
    """With many takers and adders at once, every steer is taken exactly once and each
    take returns steers in the order they were added.

    Counts as Jepsen's total-queue does (lost, duplicated, unexpected: all must be 0)
    and checks order too. Catches a take that selects and then deletes without a lock
    (two replicas get the same steer), a naive ``DELETE ... WHERE id = (SELECT ...
    LIMIT 1)`` that misses queued steers, and ``RETURNING`` rows handed out unsorted.
    """
    rng = random.Random(t.seed)
    with _checking(t, steers_are_taken_exactly_once_under_concurrency) as check:
        for round_ in range(_rounds(t, 12)):
            session = t.new_session(f"race{round_}")
            added, takes = t.run(_race([t.store], session, rng, adders=4, per_adder=6, takers=6,
                                       prefill=12))
            _account(check, session, added, takes)
            if check.violations:
                return


# --- 9-10: atomic saves, independence ---------------------------------------------------


def concurrent_saves_leave_one_transcript(t: Target) -> None:
    """Concurrent saves to one session leave exactly one of the written transcripts, and a
    reader during them sees a whole transcript, never a mix.

    Catches a save that deletes and inserts in separate transactions (two saves
    interleave into a doubled or mixed transcript) and reads that see half a save.
    """
    rng = random.Random(t.seed)
    with _checking(t, concurrent_saves_leave_one_transcript) as check:
        for round_ in range(_rounds(t, 8)):
            session = t.new_session(f"torn{round_}")
            writers = [_texts(rng.randint(1, 6), f"writer {w}") for w in range(4)]
            initial = _texts(3, "initial")
            t.run(t.store.save(session, initial))
            allowed = [initial, *writers]

            async def write(w: int) -> None:
                handle = t.handles()[w % len(t.handles())]
                await asyncio.sleep(0)
                await handle.save(session, writers[w])  # noqa: B023

            async def read() -> list[list[Message]]:
                seen = []
                for _ in range(4):
                    seen.append(await t.store.messages(session))  # noqa: B023
                    await asyncio.sleep(0)
                return seen

            results = t.run(gather_all([*(write(w) for w in range(len(writers))), read(), read()]))
            reads = [r for group in results if group is not None for r in group]
            final = t.run(t.store.messages(session))
            for seen in [*reads, final]:
                if seen not in allowed:
                    check.add(session, _torn(seen, allowed), allowed[1:], seen)
                    return
            if final == initial:
                check.add(session, "every concurrent save was lost: the initial transcript remains",
                          writers, final)
                return


def _torn(seen: object, allowed: list[list[Message]]) -> str:
    if not isinstance(seen, list):
        return f"messages() returned {type(seen).__name__}"
    sources = {
        text.split(" #")[0]
        for m in seen if isinstance(m, Message)
        for text in (p.text for p in m.content if isinstance(p, Text))
    }
    if len(sources) > 1:
        return (f"transcript torn: one read mixes messages from {len(sources)} different saves "
                f"({', '.join(sorted(sources))}); a save must be one transaction")
    if not seen:
        return ("transcript torn: a read saw an empty transcript in the middle of a save "
                "(the delete and the inserts are not one transaction)")
    partial = [a for a in allowed if len(seen) < len(a) and a[: len(seen)] == seen]
    if partial:
        return (f"transcript torn: a read saw {len(seen)} of {len(partial[0])} messages of one save "
                "(the inserts are not one transaction with the delete)")
    return "transcript torn: a read matches none of the transcripts written"


def concurrent_sessions_do_not_interfere(t: Target) -> None:
    """Saves and steers on many sessions at once each land in their own session.

    Catches a store-wide "current session" variable, a shared buffer or cursor, and
    locking that deadlocks or drops writes across sessions.
    """
    sessions = [t.new_session(f"many{i}") for i in range(12)]

    async def work(i: int, session: str) -> None:
        handle = t.handles()[i % len(t.handles())]
        for step in range(3):
            await handle.save(session, _texts(step + 1, session))
            await handle.add_steer(session, f"{session} steer {step}")

    with _checking(t, concurrent_sessions_do_not_interfere) as check:
        t.run(gather_all([work(i, s) for i, s in enumerate(sessions)]))
        for session in sessions:
            check.transcript(session, _texts(3, session), t.run(t.store.messages(session)))
            check.steers(session, [f"{session} steer {i}" for i in range(3)],
                         t.run(t.store.take_steers(session)))


def transcript_and_steers_are_independent(t: Target) -> None:
    """Saving a transcript leaves queued steers alone, and taking steers leaves the
    transcript alone.

    Catches stores that keep both in one row or document and overwrite one with the other.
    """
    session = t.new_session("independent")
    transcript = _texts(3, "kept")
    with _checking(t, transcript_and_steers_are_independent) as check:
        t.run(t.store.add_steer(session, "queued before the save"))
        t.run(t.store.save(session, transcript))
        t.run(t.store.add_steer(session, "queued after the save"))
        t.run(t.store.save(session, transcript))
        check.steers(session, ["queued before the save", "queued after the save"],
                     t.run(t.store.take_steers(session)))
        check.transcript(session, transcript, t.run(t.store.messages(session)))
        t.run(t.store.save(session, []))
        t.run(t.store.add_steer(session, "queued on an empty transcript"))
        check.transcript(session, [], t.run(t.store.messages(session)))
        check.steers(session, ["queued on an empty transcript"], t.run(t.store.take_steers(session)))


# --- 11: size ----------------------------------------------------------------------------


def large_values_round_trip(t: Target) -> None:
    """A 1 MiB message, a 256 KiB tool argument and a 2,000-message transcript come back whole.

    Catches ``TEXT``/``VARCHAR`` limits (64 KiB in MySQL, silently truncated outside
    strict mode), packet limits, and per-row sizes that only fail at scale.
    """
    mib = ("é🙂 a\x00\r\n" * (2**20 // 10 + 1))
    big_args = '{"blob": "' + "x " * (2**17) + '", "z": 1, "a": 2}'
    transcript_2000 = _texts(2000, "long")
    cases = [
        ("mib", [Message.text("user", mib)]),
        ("args", [Message("assistant", (ToolCall("call_big", "upload", big_args),))]),
        ("2000", transcript_2000),
        ("2001", [*transcript_2000, Message.text("user", "one more")]),
        ("1000", transcript_2000[:1000]),
    ]
    with _checking(t, large_values_round_trip) as check:
        session = t.new_session("large")
        for label, transcript in cases:
            if label in ("mib", "args"):
                session = t.new_session(f"large-{label}")
            t.run(t.store.save(session, transcript))
            got = t.run(t.store.messages(session))
            if got != transcript:
                check.add(session, describe_transcript(transcript, got) if isinstance(got, list)
                          else "messages() did not return a list", f"{len(transcript)} messages",
                          f"{len(got)} messages" if isinstance(got, list) else got)
        t.run(t.store.add_steer(session, mib))
        taken = t.run(t.store.take_steers(session))
        if taken != [mib]:
            diagnosis = (describe_text(mib, taken[0]) if isinstance(taken, list) and len(taken) == 1
                         else describe_steers([mib], taken) if isinstance(taken, list) else "bad result")
            check.add(session, f"a 1 MiB steer: {diagnosis}")


# --- 12: replicas ------------------------------------------------------------------------


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
        (one, _texts(3, "one")),
        (two, _texts(4, "two")),
        (one, [*_texts(4, "two"), Message.text("user", "one adds")]),
        (two, _texts(2, "two")),
        (one, [*_texts(2, "two"), Message.text("user", "one again")]),
        (two, []),
    ]
    with _checking(t, replicas_share_transcripts) as check:
        earlier: list[list[Message]] = [[]]
        for writer, transcript in steps:
            t.run(writer.save(session, transcript))
            for label, reader in (("the second handle", two), ("the first handle", one)):
                got = t.run(reader.messages(session))
                if got != transcript and got in earlier:
                    check.add(session, f"stale read: {label} still sees a transcript saved before this "
                              "save (a per-handle cache that other replicas' writes do not "
                              "invalidate)", transcript, got)
                else:
                    check.transcript(session, transcript, got)
            if check.violations:
                return
            earlier.append(transcript)
        t.run(one.add_steer(session, "left through one"))
        t.run(two.add_steer(session, "left through two"))
        check.steers(session, ["left through one", "left through two"], t.run(two.take_steers(session)))
        check.steers(session, [], t.run(one.take_steers(session)))


def steers_are_taken_once_across_replicas(t: Target) -> None:
    """A steer left through any handle is taken exactly once, in order, when takers on
    both handles race.

    The same total-queue accounting as the single-handle race, across replicas: catches
    locks that only hold within one process or connection.
    """
    assert t.replica is not None
    rng = random.Random(t.seed)
    with _checking(t, steers_are_taken_once_across_replicas) as check:
        for round_ in range(_rounds(t, 12)):
            session = t.new_session(f"replica-race{round_}")
            added, takes = t.run(_race([t.store, t.replica], session, rng, adders=4, per_adder=6,
                                       takers=6, prefill=12))
            _account(check, session, added, takes)
            if check.violations:
                return


# --- 13: the model -----------------------------------------------------------------------


def store_matches_model(t: Target) -> None:
    """Random interleavings of save, messages, add_steer and take_steers over several
    sessions (and handles) match a plain in-memory model.

    Hypothesis shrinks a failure to the shortest sequence of operations that shows it.
    Catches bugs that only appear in combination: a cache invalidated on one path but
    not another, a take that clears the transcript, ids merged only after a write.
    """
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

    handles = t.handles()

    class StoreModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            prefix = t.new_session("model-")
            self.sessions = [prefix + s for s in ("a", "A", "a ", "é", "e\u0301")]
            self.transcripts: dict[str, list[Message]] = {}
            self.steers: dict[str, list[str]] = {}

        def _check(self, session: str, kind: str, sent: Any, got: Any) -> None:
            check = _Check(t, store_matches_model)
            (check.transcript if kind == "transcript" else check.steers)(session, sent, got)
            check.raise_if_any()

        @rule(which=st.integers(0, 4), handle=st.integers(0, len(handles) - 1),
              transcript=strategies.transcripts)
        def save(self, which: int, handle: int, transcript: list[Message]) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: save({session!r}, {len(transcript)} messages)")
            t.run(handles[handle].save(session, transcript))
            self.transcripts[session] = list(transcript)

        @rule(which=st.integers(0, 4), handle=st.integers(0, len(handles) - 1))
        def read(self, which: int, handle: int) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: messages({session!r})")
            got = t.run(handles[handle].messages(session))
            self._check(session, "transcript", self.transcripts.get(session, []), got)

        @rule(which=st.integers(0, 4), handle=st.integers(0, len(handles) - 1),
              text=strategies.steer_texts)
        def add_steer(self, which: int, handle: int, text: str) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: add_steer({session!r}, {text!r})")
            t.run(handles[handle].add_steer(session, text))
            self.steers.setdefault(session, []).append(text)

        @rule(which=st.integers(0, 4), handle=st.integers(0, len(handles) - 1))
        def take(self, which: int, handle: int) -> None:
            session = self.sessions[which]
            note(f"handle {handle}: take_steers({session!r})")
            got = t.run(handles[handle].take_steers(session))
            self._check(session, "steers", self.steers.pop(session, []), got)

        @invariant()
        def first_session_matches(self) -> None:
            session = self.sessions[0]
            got = t.run(handles[-1].messages(session))
            self._check(session, "transcript", self.transcripts.get(session, []), got)

    settings = type(t.settings)(
        t.settings, max_examples=max(2, t.settings.max_examples // 2), stateful_step_count=20
    )
    seed(t.seed)(run_state_machine_as_test)(StoreModel, settings=settings)  # type: ignore[no-untyped-call]


# --- 14: bad input -----------------------------------------------------------------------


def bad_input_is_rejected(t: Target) -> None:
    """A non-string or empty session id, a non-message, or non-string steer text raises
    ``TypeError``/``ValueError`` naming the argument, and changes nothing stored.

    Catches stores that coerce ``123`` to ``"123"``, save the good half of a bad list,
    or fail deep in the driver with an error that names nothing.
    """
    session = t.new_session("bad-input")
    good = _texts(2, "good")
    bad_calls: list[tuple[str, str, Callable[[], Any]]] = [
        ("save(123, ...)", "session", lambda: t.store.save(123, good)),
        ("save(None, ...)", "session", lambda: t.store.save(None, good)),
        ("save(b'id', ...)", "session", lambda: t.store.save(session.encode(), good)),
        ("save('', ...)", "session", lambda: t.store.save("", good)),
        ("save(id longer than the limit, ...)", "session",
         lambda: t.store.save("x" * (MAX_SESSION_ID_BYTES + 1), good)),
        ("save(session, [message, 'not a message'])", "messages",
         lambda: t.store.save(session, [good[0], "not a message"])),
        ("save(session, [message, {'role': 'user'}])", "messages",
         lambda: t.store.save(session, [good[0], {"role": "user", "content": []}])),
        ("save(session, None)", "messages", lambda: t.store.save(session, None)),
        ("save(session, 'text')", "messages", lambda: t.store.save(session, "some text")),
        ("messages(42)", "session", lambda: t.store.messages(42)),
        ("add_steer(session, 5)", "text", lambda: t.store.add_steer(session, 5)),
        ("add_steer(session, b'bytes')", "text", lambda: t.store.add_steer(session, b"bytes")),
        ("add_steer(None, 'text')", "session", lambda: t.store.add_steer(None, "text")),
        ("take_steers(['a'])", "session", lambda: t.store.take_steers(["a"])),
    ]
    with _checking(t, bad_input_is_rejected) as check:
        t.run(t.store.save(session, good))
        t.run(t.store.add_steer(session, "kept"))
        for call, argument, make in bad_calls:
            try:
                t.run(make())
            except (TypeError, ValueError) as exc:
                if argument not in str(exc):
                    check.add(session, f"{call} raised {type(exc).__name__} that does not name the "
                              f"argument {argument!r}: {exc}")
            except Exception as exc:
                check.add(session, f"{call} raised {type(exc).__name__} ({exc}); expected "
                          f"TypeError or ValueError naming {argument!r}")
            else:
                check.add(session, f"{call} was accepted; expected TypeError or ValueError "
                          f"naming {argument!r}")
        check.transcript(session, good, t.run(t.store.messages(session)), good)
        check.steers(session, ["kept"], t.run(t.store.take_steers(session)))


CLAUSES: tuple[Callable[[Target], None], ...] = (
    transcript_round_trips_exactly,
    tool_arguments_are_kept_verbatim,
    save_replaces_the_transcript,
    unknown_session_is_empty,
    sessions_are_isolated,
    stored_data_is_not_aliased,
    steers_are_taken_in_order_exactly_once,
    steers_are_taken_exactly_once_under_concurrency,
    concurrent_saves_leave_one_transcript,
    concurrent_sessions_do_not_interfere,
    transcript_and_steers_are_independent,
    large_values_round_trip,
    replicas_share_transcripts,
    steers_are_taken_once_across_replicas,
    store_matches_model,
    bad_input_is_rejected,
)
"""Every clause, in the order a run executes them."""

NEEDS_REPLICA: frozenset[Callable[[Target], None]] = frozenset(
    {replicas_share_transcripts, steers_are_taken_once_across_replicas}
)
"""Clauses that need a second handle on the same data (``run_conformance(replica=...)``)."""
