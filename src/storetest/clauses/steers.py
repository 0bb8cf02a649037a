"""Steers: handed out oldest first, each exactly once, also when many takers and adders
race; and independent of the transcript.

Real bugs behind these clauses: a take that selects and then deletes without a lock
(two replicas get the same steer); ``DELETE ... RETURNING`` rows handed out unsorted;
a naive ``DELETE ... WHERE id = (SELECT ... LIMIT 1)`` that misses queued steers; a
queue sorted by a timestamp that ties; steers and transcript in one row, where writing
one overwrites the other.

Counting follows Jepsen's ``total-queue``: lost, duplicated and unexpected steers are
counted, and, unlike Jepsen, all three must be zero and every take must be in order.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from hypothesis import note
from hypothesis import strategies as st

from storetest._engine import inputs, strategies
from storetest._engine.diagnosis import SAME_NUMBERS
from storetest._engine.failures import RAISED, Check, checking
from storetest._engine.harness import Handle, Target
from storetest.clauses._registry import clause
from storetest.clauses._support import examples, texts

__all__ = ["account", "steer_race"]


@clause(needs=("steers",), cost=1)
def steers_are_taken_in_order_exactly_once(t: Target) -> None:
    """Steers come back oldest first, each exactly once: a second take is empty,
    identical texts stay two steers, the text is verbatim, and one take returns
    1,001 queued steers whole (one past the commonest page size), 1 MiB of text in all.

    Catches a queue that is last-in-first-out, sorted by a timestamp that ties (or by
    text), deduplicated like a set, read without being deleted, or capped by a
    ``LIMIT`` on the take or a 1,000-steer page (``LRANGE key 0 999``, then ``DEL``),
    or a take that returns only what fits a byte budget.
    """
    corpus = ["b", "a", "c", "a", "a", "10", "9", "1.0", "", " ", *strategies.NASTY_TEXTS, *inputs.family_values()]
    # 1,001 steers of about 1 KiB each: 1 MiB of text behind one take (the input
    # model's volume cells), past any fetch budget a take might keep to.
    pad = "s" * (inputs.STEER_QUEUE_BYTES // 1001 - 12)
    many = [f"queued #{i} {pad}" for i in range(1001)]
    with checking(steers_are_taken_in_order_exactly_once, t.run) as check:
        for label, queue in (("order", corpus), ("thousand", many)):
            session = t.new_session(label)
            added = [text for text in queue
                     if check.call(session, f"add_steer({text!r})", t.store.add_steer(session, text))
                     is not RAISED]
            check.steers(session, added, check.call(session, "take_steers()", t.store.take_steers(session)))
            second = check.call(session, "take_steers()", t.store.take_steers(session))
            if second and second is not RAISED:
                check.add(session, "steers taken twice: the second take returned steers again "
                          "(the take read the queue but did not delete it)", expected=[], got=second)

    @examples(t, st.lists(st.lists(strategies.steer_texts, max_size=5), min_size=1, max_size=3))
    def example(batches: list[list[str]]) -> None:
        session = t.new_session("order")
        note(f"session {session!r}")
        with checking(steers_are_taken_in_order_exactly_once, t.run) as check:
            for batch in batches:
                for text in batch:
                    if check.call(session, "add_steer()", t.store.add_steer(session, text)) is RAISED:
                        return
                check.steers(session, batch, check.call(session, "take_steers()", t.store.take_steers(session)))
                if check.violations:
                    return
            check.steers(session, [], check.call(session, "take_steers()", t.store.take_steers(session)))

    example()


@dataclass
class _Take:
    handle: int
    started: float
    ended: float
    steers: list[str]


def steer_race(
    t: Target, handles: Sequence[Handle], session: str, *, waves: int = 3, adders: int = 4,
    takers: int = 4, prefill: int = 8,
) -> tuple[list[str], list[_Take]]:
    """Prefill a queue, then run ``waves`` of adders and takers started together (each
    adder adds two steers in a row, each taker takes twice); return what was added
    (acknowledged) and every take with its start and end times."""
    added: list[str] = []
    takes: list[_Take] = []
    for i in range(prefill):
        t.run(handles[0].add_steer(session, f"p-{i}"))
        added.append(f"p-{i}")

    def adder(a: int, wave: int) -> Callable[[], Awaitable[None]]:
        handle = handles[a % len(handles)]

        async def run() -> None:
            for i in (2 * wave, 2 * wave + 1):
                await handle.add_steer(session, f"a{a}-{i}")
                added.append(f"a{a}-{i}")

        return run

    def taker(k: int) -> Callable[[], Awaitable[None]]:
        index = k % len(handles)

        async def run() -> None:
            for _ in range(2):
                began = time.monotonic()
                got = await handles[index].take_steers(session)
                takes.append(_Take(index, began, time.monotonic(), list(got)))

        return run

    for wave in range(waves):
        calls = [adder(a, wave) for a in range(adders)] + [taker(k) for k in range(takers)]
        t.rng.shuffle(calls)
        t.race(calls)
    # One final take after everything, so a steer still queued counts as taken late,
    # not as lost; a correct store returns nothing here.
    began = time.monotonic()
    takes.append(_Take(0, began, time.monotonic(), list(t.run(handles[0].take_steers(session)))))
    return added, takes


def _named(steers: list[str]) -> str:
    shown = ", ".join(map(repr, steers[:3]))
    return shown + (f" and {len(steers) - 3} more" if len(steers) > 3 else "")


def _adding_handle(steer: str, handles: int) -> int:
    """Which handle :func:`steer_race` added ``steer`` through: the prefill through the
    first, adder ``a`` through handle ``a % handles``."""
    return 0 if steer.startswith("p-") else int(steer[1:].split("-")[0]) % handles


def _shared(lost: list[str], added: list[str], handles: int) -> str:
    """What the lost steers share, when they share something the others do not."""
    if handles < 2:
        return ""
    through = {_adding_handle(s, handles) for s in lost}
    kept = {_adding_handle(s, handles) for s in added if s not in set(lost)}
    if len(through) == 1 and kept - through:
        label = ("first", "second", "third")[min(next(iter(through)), 2)]
        return (f"; every lost steer was added through the {label} handle while the other handle's came back "
                "(two handles' adds overwrote each other: steers keyed by a per-handle counter or cache)")
    return ""


def _numbered_alike(lost: list[str], added: list[str], takes: list[_Take], handles: int) -> bool:
    """Whether the lost steers look replaced by another handle's steer with the same number
    in its handle's sequence (the order :func:`steer_race` saw each handle's adds end):
    each lost steer has a taken twin of another handle with its number, and no take held
    two steers with one number, as a queue keyed by that number would."""
    if handles < 2 or not lost:
        return False
    counted: Counter[int] = Counter()
    number: dict[str, tuple[int, int]] = {}
    for s in added:
        h = _adding_handle(s, handles)
        number[s] = (h, counted[h])
        counted[h] += 1
    taken = {number[s] for take in takes for s in take.steers if s in number}
    if not all(any((h, number[s][1]) in taken for h in range(handles) if h != number[s][0]) for s in lost):
        return False
    return all(len({number[s][1] for s in take.steers if s in number}) == len(take.steers) for take in takes)


def account(check: Check, session: str, added: list[str], takes: list[_Take], handles: int = 1) -> None:
    """Jepsen's total-queue accounting, with duplicates and reordering counted as failures;
    ``handles`` is how many handles :func:`steer_race` added through (lost steers that
    all came through one of them are said so)."""
    taken = Counter(s for take in takes for s in take.steers)
    want = Counter(added)
    lost = sorted(set(want) - set(taken))
    duplicated = sorted(s for s, n in taken.items() if n > 1)
    unexpected = sorted(set(taken) - set(want))
    if lost or duplicated or unexpected:
        parts = []
        if not duplicated and not unexpected and _numbered_alike(lost, added, takes, handles):
            parts.append(f"{len(lost)} steer(s) replaced ({_named(lost)}, each by another handle's steer with its "
                         f"number): {SAME_NUMBERS}")
            lost_words = ""
        else:
            lost_words = "lost"
        if duplicated:
            parts.append(f"{len(duplicated)} steer(s) duplicated ({_named(duplicated)}; handed to two takers: the take "
                         "reads and deletes without a lock, or in two steps)")
        if lost and lost_words:
            parts.append(f"{len(lost)} steer(s) lost ({_named(lost)}; acknowledged by add_steer, never taken: a "
                         "take that deletes more than it returns, or an add that was not committed"
                         f"{_shared(lost, added, handles)})")
        if unexpected:
            parts.append(f"{len(unexpected)} steer(s) never added came back ({_named(unexpected)})")
        check.add(
            session,
            ", ".join(parts) + f" [lost={len(lost)} duplicated={len(duplicated)} "
            f"unexpected={len(unexpected)} of {len(added)} added, {len(takes)} takes]",
            lost=lost[:5] or None, duplicated=duplicated[:5] or None, unexpected=unexpected[:5] or None,
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
                    sent=list(items),
                    got=batch,
                )
                return


@clause(needs=("steers",), races=True)
def steers_are_taken_exactly_once_under_concurrency(t: Target) -> None:
    """With many takers and adders at once, every steer is taken exactly once and each
    take returns steers in the order they were added.

    Callers start together (threads for a plain store, tasks for an async one) in
    every wave of every round. Catches a take that selects and then deletes without a
    lock, or in two locked steps (two takers get the same steer), a naive ``DELETE ...
    WHERE id = (SELECT ... LIMIT 1)`` that misses queued steers, and ``RETURNING``
    rows handed out unsorted.
    """
    with checking(steers_are_taken_exactly_once_under_concurrency, t.run) as check:
        for round_ in range(t.profile.race_rounds):
            session = t.new_session(f"race{round_}")
            added, takes = steer_race(t, [t.store], session)
            t.tick()
            account(check, session, added, takes)
            if check.violations:
                return


@clause(needs=("transcript", "steers"))
def transcript_and_steers_are_independent(t: Target) -> None:
    """Saving a transcript leaves queued steers alone, and taking steers leaves the
    transcript alone.

    Catches stores that keep both in one row or document and overwrite one with the other,
    and stores that keep steers in the transcript's row and so drop a steer left for a
    session that has no transcript yet.
    """
    session = t.new_session("independent")
    transcript = texts(3, "kept")
    s = t.store
    with checking(transcript_and_steers_are_independent, t.run) as check:
        for what, work in (("add_steer()", s.add_steer(session, "queued before the save")),
                           ("save()", s.save(session, transcript)),
                           ("add_steer()", s.add_steer(session, "queued after the save")),
                           ("save()", s.save(session, transcript))):
            check.call(session, what, work)
        both = ["queued before the save", "queued after the save"]
        taken = check.call(session, "take_steers()", s.take_steers(session))
        if taken == both[1:]:
            check.add(session, "the steer queued before the session's first save was lost, the one after it kept: "
                      "steers kept in the session's row or document, which the first save creates (an UPDATE "
                      "with no upsert drops a steer for a session with no transcript yet)", both, taken)
        else:
            check.steers(session, both, taken)
        check.transcript(session, transcript, check.call(session, "messages()", s.messages(session)))
        check.call(session, "save([])", s.save(session, []))
        check.call(session, "add_steer()", s.add_steer(session, "queued on an empty transcript"))
        check.transcript(session, [], check.call(session, "messages()", s.messages(session)))
        check.steers(session, ["queued on an empty transcript"],
                     check.call(session, "take_steers()", s.take_steers(session)))
