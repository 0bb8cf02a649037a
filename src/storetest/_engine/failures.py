"""What a clause reports: every violation it saw, collected like Go's ``fstest`` does,
and the exception that carries them.

A clause opens a :class:`Check`, records each problem with :meth:`Check.add` (or lets
:meth:`Check.call` turn a store's exception into one) and carries on; only at the end
does :meth:`Check.raise_if_any` raise one :class:`ConformanceFailure` holding them all.
So one bad input never hides the next: a store that raises on an id containing NUL is
still checked for merging ``'a'`` with ``'A'``.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from storetest._engine.diagnosis import describe_backend_refusal, describe_steers, describe_transcript, shorten
from storetest.contract import Message

__all__ = [
    "LABELS",
    "RAISED",
    "Check",
    "ConformanceFailure",
    "Violation",
    "announce",
    "checking",
    "clause_link",
    "conformance_failures",
    "describe_exception",
    "store_frame",
    "store_frames",
]

#: Called with each failure's diagnosis as a clause raises it (while a clause runs,
#: :func:`storetest.clauses._support.shrink_budget` listens, to shrink less a failure
#: whose line names its cause).
failure_listeners: list[Callable[[str], None]] = []

#: How many violations a failure message lists before ``... and N more``.
MAX_SHOWN: Final = 10

#: The page documenting every clause, relative to the repository root.
CONTRACT_PAGE: Final = "docs/contract.md"


def clause_link(clause: str) -> str:
    """Where ``clause`` is documented: its section of the contract page."""
    return f"{CONTRACT_PAGE}#clause-{clause}"


#: The labels a violation's two values may carry: what was sent and what came back, or
#: what a read should have returned, or the lost, duplicated and unexpected of an account.
LABELS: Final = ("sent", "got", "expected", "lost", "duplicated", "unexpected", "added", "taken")


@dataclass(frozen=True)
class Violation:
    """One thing a store got wrong: where, what kind of corruption, and two values, each
    under the label that says what it is (``sent``/``got`` for a round trip,
    ``expected``/``got`` for a read whose right answer is not what was sent,
    ``lost``/``duplicated`` for an account of a race)."""

    session: str
    diagnosis: str
    sent: str = ""
    got: str = ""
    #: What ``sent`` and ``got`` hold (each one of :data:`LABELS`).
    labels: tuple[str, str] = ("sent", "got")

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(self.labels))  # a JSON report gives a list

    def lines(self) -> list[str]:
        out = [f"session {self.session!r}: {self.diagnosis}"]
        width = max(len(label) for label in self.labels) + 1
        for label, value in zip(self.labels, (self.sent, self.got), strict=True):
            if value:
                out.append(f"    {label + ':':<{width}} {value}")
        return out


class ConformanceFailure(AssertionError):
    """A store broke a clause of the contract. ``diagnosis`` is the one-line summary the
    report shows; ``violations`` has every problem the clause saw."""

    def __init__(self, clause: str, violations: Sequence[Violation], what: str = "") -> None:
        self.clause = clause
        self.violations = list(violations)
        self.what = what
        self.diagnosis = self.violations[0].diagnosis if self.violations else "failed"
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.clause}: {len(self.violations)} violation(s)"]
        for v in self.violations[:MAX_SHOWN]:
            lines += ["  " + line for line in v.lines()]
        if len(self.violations) > MAX_SHOWN:
            lines.append(f"  ... and {len(self.violations) - MAX_SHOWN} more")
        if self.what:
            lines.append(f"the clause: {self.what}")
        lines.append(f"documented at: {clause_link(self.clause)}")
        return "\n".join(lines)


def conformance_failures(error: BaseException) -> list[ConformanceFailure]:
    """Every :class:`ConformanceFailure` in ``error``, looking inside exception groups
    (Hypothesis raises one when an example fails in more than one way)."""
    if isinstance(error, ConformanceFailure):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        return [f for inner in error.exceptions for f in conformance_failures(inner)]
    # Hypothesis's Flaky errors carry the failure they could not repeat as their cause.
    cause = error.__cause__ or error.__context__
    if cause is not None and type(error).__module__.startswith("hypothesis"):
        return conformance_failures(cause)
    return []


class _Raised:
    def __repr__(self) -> str:
        return "RAISED"


#: What :meth:`Check.call` returns when the store raised (the violation is recorded).
RAISED: Final = _Raised()


def describe_exception(error: BaseException) -> str:
    """``Type: first line``; the cause's text too when the error's own text hides it."""
    text = str(error).strip().splitlines()
    out = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause).strip() and str(cause).strip() not in out:
        out += f" (caused by {type(cause).__name__}: {str(cause).strip().splitlines()[0]})"
    out = out if len(out) <= 300 else out[:297] + "..."
    meaning = describe_backend_refusal(out)
    return out if meaning is None else f"{meaning}: {out}"


def announce(diagnosis: str) -> None:
    """Tell the :data:`failure_listeners` a clause failed with ``diagnosis``."""
    for listener in failure_listeners:
        listener(diagnosis)


def store_frame(error: BaseException, roots: Sequence[str]) -> str:
    """`` (at FILE:LINE in FUNC)``: the innermost frame of the store's own code (in files
    under ``roots``) that ``error`` passed through; ``""`` when none did."""
    if not roots:
        return ""
    # Without the source lines: only the place is named (a refused save of MiB values
    # raises on every message it retries).
    walked = traceback.StackSummary.extract(traceback.walk_tb(error.__traceback__), lookup_lines=False)
    frames = [f for f in walked if any(f.filename.startswith(r) for r in roots)]
    if not frames:
        return ""
    f = frames[-1]
    # Named from the store's package (or its module's directory), not this machine's root.
    root = next(r for r in roots if f.filename.startswith(r))
    shown = os.path.relpath(f.filename, os.path.dirname(root.rstrip(os.sep)))
    return f" (at {shown}:{f.lineno} in {f.name})"


class Check:
    """Collects violations; raises them all at once."""

    def __init__(self, clause: Callable[..., Any], run: Callable[[Any], Any] | None = None) -> None:
        self.clause = clause
        self._run = run
        self.violations: list[Violation] = []

    def add(self, session: str, diagnosis: str, sent: object = None, got: object = None, *,
            expected: object = None, lost: object = None, duplicated: object = None,
            unexpected: object = None) -> None:
        """Record a violation. Its two values are ``sent`` and ``got`` (a round trip); or,
        by keyword, ``expected`` for what the read should have returned when that is not
        what was sent (an empty list after a clear, the latest items for a limit); or an
        account's ``lost`` with its ``duplicated`` (else its ``unexpected``, else ``got``).
        Both values are printed the same way, each cut to 300 characters."""
        first = [(name, value) for name, value in (("sent", sent), ("expected", expected), ("lost", lost))
                 if value is not None]
        second = [(name, value) for name, value in (("duplicated", duplicated), ("unexpected", unexpected),
                                                    ("got", got)) if value is not None]
        assert len(first) <= 1, f"one of sent, expected, lost: {[n for n, _ in first]}"
        (one, a), (two, b) = (first or [("sent", None)])[0], (second or [("got", None)])[0]
        self.violations.append(Violation(session, diagnosis, "" if a is None else shorten(a, 300),
                                         "" if b is None else shorten(b, 300), (one, two)))

    def call(self, session: str, what: str, work: Any) -> Any:
        """Run ``work`` (a coroutine from a store handle); if the store raises, record
        ``what raised ...`` as a violation and return :data:`RAISED` so the clause can
        go on with its next input."""
        assert self._run is not None, "Check.call needs the target's run function"
        try:
            return self._run(work)
        except Exception as exc:
            self.add(session, f"{what} raised {describe_exception(exc)}{self._where(exc)}")
            return RAISED

    def _where(self, error: BaseException) -> str:
        """`` (at FILE:LINE in FUNC)``: the innermost frame of the store's own code that
        the error passed through (``t.run``'s target knows which code is the store's)."""
        target = getattr(self._run, "__self__", None)
        store = getattr(getattr(target, "store", None), "raw", None)
        if store is None:
            return ""
        from storetest._engine.harness import code_roots

        return store_frame(error, code_roots(store))

    def differs(self, session: str, diagnosis: str, sent: object, got: object,
                expected: bool = False) -> None:
        """Record ``diagnosis`` with ``sent`` shown as what was sent, or as what the read
        should have returned when ``expected`` or when it is empty (nothing was sent: the
        ``[]`` of a clear, a take, a pop)."""
        if expected or not sent:
            self.add(session, diagnosis, expected=sent, got=got)
        else:
            self.add(session, diagnosis, sent, got)

    def transcript(
        self, session: str, sent: Sequence[Message], got: object, previous: Sequence[Message] = (),
        expected: bool = False,
    ) -> None:
        if got is RAISED:
            return
        if not isinstance(got, list):
            self.add(session, f"messages() returned {type(got).__name__}, not a list", got=got)
        elif got != list(sent):
            self.differs(session, describe_transcript(sent, got, previous), sent, got, expected)

    def steers(self, session: str, sent: Sequence[str], got: object, expected: bool = False,
               numbers: Sequence[tuple[int, int]] | None = None, taken: Collection[str] = ()) -> None:
        """``numbers``: which handle added each steer and how many it had added to the
        session before; ``taken``: what earlier takes returned (see :func:`describe_steers`)."""
        if got is RAISED:
            return
        if not isinstance(got, list):
            self.add(session, f"take_steers() returned {type(got).__name__}, not a list", got=got)
        elif got != list(sent):
            self.differs(session, describe_steers(sent, got, numbers, taken), sent, got, expected)

    def raise_if_any(self) -> None:
        if self.violations:
            what = " ".join((self.clause.__doc__ or "").strip().split("\n\n")[0].split())
            failure = ConformanceFailure(self.clause.__name__, self.violations, what)
            announce(failure.diagnosis)
            raise failure


@contextmanager
def checking(clause: Callable[..., Any], run: Callable[[Any], Any] | None = None) -> Iterator[Check]:
    """``with checking(clause, t.run) as check:`` collect, then raise everything seen."""
    check = Check(clause, run)
    yield check
    check.raise_if_any()


def _folded(lines: list[str]) -> list[str]:
    """Runs of one repeated frame (a recursion without end) as the frame and a count."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and lines[j] == lines[i]:
            j += 1
        out.append(lines[i])
        if j - i > 2:
            out.append(f"  ... {j - i - 1} more frames of the same")
        else:
            out += lines[i + 1:j]
        i = j
    return out


def store_frames(error: BaseException, roots: Sequence[str]) -> str:
    """The traceback of ``error`` and its causes, cut to the frames in files under
    ``roots`` (the store's own code): a driver's or asyncio's frames tell the store's
    author nothing. Keeps the innermost frame when none is theirs."""
    blocks: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(blocks) < 4:
        seen.add(id(current))
        frames = traceback.extract_tb(current.__traceback__)
        own = [f for f in frames if any(f.filename.startswith(r) for r in roots)] or frames[-1:]
        text = str(current).strip().replace("\n", " ")
        block = [("caused by " if blocks else "") + f"{type(current).__name__}: {text}"]
        block += _folded([f"  {f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in own])
        blocks.append("\n".join(block))
        current = current.__cause__ or current.__context__
    return "\n".join(blocks)
