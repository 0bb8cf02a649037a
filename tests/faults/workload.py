"""What the fault suite writes and how it judges what it reads back: transcripts that
say whether they are whole, a ledger of steers that counts lost, duplicated and
unexpected ones the way the contract allows under :class:`OutcomeUnknown`, and the
check that every error is a ``StoreError`` naming its operation and session."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from storetest.contract import Message, OutcomeUnknown, StoreError

# -- transcripts --------------------------------------------------------------------------


def transcript(writer: str, generation: int) -> list[Message]:
    """The transcript ``writer`` saves at ``generation``: a length that varies, a first
    half shared by every save of that length (so incremental saves keep a prefix), a
    second half and a last message unique to this save. Empty now and then."""
    length = (generation * 7919) % 41
    if length == 0:
        return []
    body = [
        Message.text("user", f"{i}/{length}" if i < length // 2 else f"{i}/{length} {writer}:{generation}")
        for i in range(length - 1)
    ]
    return [*body, Message.text("assistant", f"end {writer}:{generation}:{length}")]


_SEAL = re.compile(r"end (\S+):(\d+):(\d+)")


def whole(messages: list[Message]) -> tuple[str, int] | None:
    """``(writer, generation)`` if ``messages`` is exactly one save's transcript
    (``("", 0)`` for the empty one); ``None`` for a torn or foreign transcript."""
    if not messages:
        return ("", 0)
    last = messages[-1].content[0] if messages[-1].content else None
    match = _SEAL.fullmatch(getattr(last, "text", ""))
    if match is None:
        return None
    writer, generation = match.group(1), int(match.group(2))
    return (writer, generation) if messages == transcript(writer, generation) else None


# -- errors -------------------------------------------------------------------------------

_OPERATION_WORDS = {
    "save": ("save",),
    "messages": ("read", "messages"),
    "add_steer": ("add_steer",),
    "take_steers": ("take_steers",),
    "append": ("append",),
    "create": ("create",),
    "entries": ("read",),
}


def error_problem(operation: str, session: str, exc: BaseException) -> str | None:
    """What is wrong with ``exc`` as an error of ``operation`` on ``session``, if
    anything: not a StoreError, or a message that does not name the operation, the
    session and a cause of its own."""
    if not isinstance(exc, StoreError):
        return f"{operation} on {session!r} raised {type(exc).__name__}, not StoreError: {exc}"
    text = str(exc)
    head, sep, cause = text.partition(": ")
    if not any(word in head for word in _OPERATION_WORDS[operation]) or repr(session) not in head:
        return f"{operation} on {session!r}: the message does not name both: {text!r}"
    if not sep or not cause.strip() or "__aexit__" in cause:
        return f"{operation} on {session!r}: the message hides the cause: {text!r}"
    return None


_KINDS = (
    ("terminating connection due to administrator command", "terminated by the server"),
    ("Connection was killed", "connection killed"),
    ("Lost connection", "lost connection"),
    ("gone away", "server gone away"),
    ("connection to PostgreSQL was lost", "lost connection"),
    ("connection was lost", "lost connection"),
    ("broke mid-protocol", "driver protocol broken"),
    ("Deadlock", "deadlock"),
    ("Lock wait timeout", "lock wait timeout"),
)


def error_kind(exc: BaseException) -> str:
    """A short label for the figures: the class, then what the cause says."""
    label = type(exc).__name__
    text = str(exc)
    for needle, kind in _KINDS:
        if needle in text:
            return f"{label}: {kind}"
    return f"{label}: {text.partition(': ')[2][:60]}"


# -- steers -------------------------------------------------------------------------------


@dataclass
class SteerLedger:
    """Every attempt to add and take, and the verdicts the contract allows.

    A steer is ``acked`` once an add returned, ``failed`` if its only attempt raised a
    plain StoreError (it must never be taken), ``unknown`` if an attempt raised
    OutcomeUnknown (it may be queued once per such attempt, plus once if a retry
    returned). Takes either returned (``taken``), raised OutcomeUnknown (their
    ``steers`` may or may not be gone), or raised a plain StoreError (nothing taken).
    """

    attempts: Counter[str] = field(default_factory=Counter)
    unknown_adds: Counter[str] = field(default_factory=Counter)
    acked: set[str] = field(default_factory=set)
    taken: list[list[str]] = field(default_factory=list)
    unknown_takes: list[list[str]] = field(default_factory=list)

    def added(self, text: str, exc: BaseException | None) -> None:
        self.attempts[text] += 1
        if exc is None:
            self.acked.add(text)
        elif isinstance(exc, OutcomeUnknown):
            self.unknown_adds[text] += 1

    def took(self, steers: list[str] | None, exc: BaseException | None) -> None:
        if exc is None and steers is not None:
            self.taken.append(steers)
        elif isinstance(exc, OutcomeUnknown):
            self.unknown_takes.append(exc.steers)

    def verdict(self) -> dict[str, int]:
        """Figures, each of ``lost``, ``duplicated``, ``unexpected``, ``reordered``
        required to be 0."""
        seen = Counter(s for take in self.taken for s in take)
        maybe_taken = {s for take in self.unknown_takes for s in take}
        # An add that landed once for a return and once per OutcomeUnknown attempt.
        allowed = {t: self.unknown_adds[t] + (1 if t in self.acked else 0) for t in self.attempts}
        duplicated = sum(n - 1 for t, n in seen.items() if n > max(allowed.get(t, 1), 1))
        retried_twice = sum(n - 1 for t, n in seen.items() if n > 1) - duplicated
        unexpected = sum(1 for t in seen if allowed.get(t, 0) == 0)
        lost = sum(1 for t in self.acked if t not in seen and t not in maybe_taken)
        # A steer whose add raised OutcomeUnknown may land at any time after: its command,
        # held in a stalled network, reaches the server after the call gave up and after
        # later adds (the Redis stall test saw a1:n, a1:n+1, a1:n). Only the others'
        # order is judged.
        reordered = sum(1 for take in self.taken if not _in_order([s for s in take if s not in self.unknown_adds]))
        return {
            "steers added": len(self.attempts),
            "adds with unknown outcome": sum(self.unknown_adds.values()),
            "takes returned": len(self.taken),
            "takes with unknown outcome": len(self.unknown_takes),
            "steers taken by unknown-outcome takes": sum(
                1 for t in maybe_taken if t not in seen
            ),
            "duplicated after OutcomeUnknown retries": retried_twice,
            "lost": lost,
            "duplicated": duplicated,
            "unexpected": unexpected,
            "reordered": reordered,
        }


def _in_order(take: list[str]) -> bool:
    # Steers are "<adder>:<n>": each adder's must come out in the order it added them.
    last: dict[str, int] = {}
    for text in take:
        adder, _, n = text.rpartition(":")
        if int(n) < last.get(adder, -1):
            return False
        last[adder] = int(n)
    return True
