"""What a run reports: the value types :func:`storetest.check` returns and every
renderer reads, and the terminal table that is ``str(report)``.

A module of its own, below both the runner (which makes these values) and the
renderers in :mod:`storetest.report` (which read them), so neither imports the other.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:  # not imported at run time: a report is rendered without the engine
    from storetest._engine.failures import Violation

__all__ = ["CAPABILITY_NAMES", "SETUP_ROW", "SHOWN", "ClauseResult", "Interrupted", "Outcome", "Progress", "Report",
           "interrupted_line", "not_claimed", "render_text", "summary_line", "versions"]

Outcome = Literal["passed", "failed", "skipped", "not claimed", "error", "interrupted"]

#: How each outcome is shown in a table.
SHOWN: Final = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "not claimed": "n/c", "error": "ERROR",
                "interrupted": "INTR"}

#: What a report calls a capability when its key is not plain English; later keys build on
#: earlier ones (a LlamaIndex chat store is an item history), so a clause lacking several is
#: filed under the last.
#: A LangGraph checkpointer's optional methods, each a capability of its own.
OPTIONAL_CHECKPOINT_METHODS: Final = ("copy_thread", "prune", "delete_for_runs")

#: A checkpointer's optional methods come before it: a store lacking both is filed as no checkpointer.
CAPABILITY_NAMES: Final = {"log": "entry log", "items": "item history", "adk": "ADK session service",
                           "copy_thread": "LangGraph copy_thread", "prune": "LangGraph prune",
                           "delete_for_runs": "LangGraph delete_for_runs", "checkpoints": "LangGraph checkpointer",
                           "deletes": "session delete",
                           "llama_index": "LlamaIndex chat store",
                           "llama_index_db": "LlamaIndex AsyncDBChatStore"}


@dataclass(frozen=True)
class ClauseResult:
    """One clause's verdict."""

    clause: str
    outcome: Outcome
    #: One line: the kind of corruption seen, or why the clause did not run.
    diagnosis: str = ""
    violations: tuple[Violation, ...] = ()
    #: The full failure text (every violation, the falsifying example, the store's
    #: own frames of an exception), for the person whose store failed.
    details: str = ""
    seconds: float = 0.0
    #: A seed does not pin this clause's verdict (see ``storetest.runner.RACE_NOTE``).
    races: bool = False
    promise: str = ""
    topic: str = ""
    #: The factory failed (making or tearing down the store), not the clause.
    setup: bool = False
    #: The command that replays this failure, when the caller knows a better one than
    #: ``storetest check`` (the plugin puts its pytest command here).
    replay: str = ""
    #: What the store cleanly refused that the protocol does not promise (ids a backend
    #: cannot hold): its limits, listed in the report, not failures.
    limits: tuple[str, ...] = ()
    #: The real bugs the clause exists for (its docstring after the promise).
    exists_for: str = ""
    #: How a failing example went, step by step (the shrunk state-machine story, the
    #: falsifying example), as Hypothesis reported it.
    story: tuple[str, ...] = ()
    #: What to know about the verdict: the failure did not repeat, shrinking was cut
    #: short, the clause races.
    remarks: tuple[str, ...] = ()
    #: For a clause the store does not claim: the capabilities it lacks.
    lacks: tuple[str, ...] = ()


def not_claimed(clause: str, lacks: Iterable[str], methods: Mapping[str, tuple[str, ...]], *,
                promise: str = "", topic: str = "", exists_for: str = "", seconds: float = 0.0) -> ClauseResult:
    """The result of a clause needing capabilities (``lacks``) the store does not claim;
    ``methods`` maps each capability to its methods (``storetest._engine.harness.CAPABILITIES``)."""
    missing = sorted(lacks)
    names = " / ".join(m for cap in missing for m in methods[cap])
    optional = [c for c in missing if c in OPTIONAL_CHECKPOINT_METHODS]
    if optional and len(optional) == len(missing):
        # Every LangGraph saver has the method: the base class's, which raises NotImplementedError.
        said = (f"the saver does not override {' / '.join(optional)} (BaseCheckpointSaver's raises "
                "NotImplementedError; it is optional)")
    else:
        said = f"the store does not claim {', '.join(missing)} (it has no {names} method)"
    return ClauseResult(clause, "not claimed", said, seconds=seconds, promise=promise, topic=topic,
                        exists_for=exists_for, lacks=tuple(missing))


@dataclass
class Progress:
    """What :func:`check` is doing, for a progress display: sent when a clause starts
    (``result`` is None), every few seconds while it runs, and when it ends."""

    clause: str
    index: int
    total: int
    elapsed: float = 0.0
    #: Examples, rounds or state-machine runs finished so far in this clause.
    examples: int = 0
    result: ClauseResult | None = None
    #: The calls into the store or a factory in flight, oldest first, with the seconds
    #: each has taken so far (set on every heartbeat).
    in_flight: tuple[tuple[str, float], ...] = ()

    def flying(self) -> str:
        """``in flight: take_steers('s') on the factory's store for 12 s``, or ""."""
        if not self.in_flight:
            return ""
        return "in flight: " + "; ".join(f"{what} for {seconds:.0f} s" for what, seconds in self.in_flight)


@dataclass(frozen=True)
class Report:
    """Every verdict of one run, in clause order, with what replays it."""

    name: str
    profile: str
    seed: int
    nonce: str
    results: tuple[ClauseResult, ...]
    #: Capabilities the store claims by its methods (``transcript``, ``steers``, ...).
    capabilities: tuple[str, ...] = ()
    #: Capabilities present only in part: ``{"steers": ["add_steer"]}``.
    partial: Mapping[str, list[str]] = field(default_factory=dict)
    #: Clauses that did not run: left out by a selection (``clauses=``, ``-k``: also in
    #: ``deselected``), or not reached (the set-up failed, or Ctrl-C stopped the run).
    not_run: tuple[str, ...] = ()
    #: Why the run stopped early (the factory failed), or "".
    stopped: str = ""
    #: The factory and replica as ``module:name``, for the report.
    target: str = ""
    replica: str = ""
    #: When the run started (UTC, ISO 8601), and the versions that made the verdict.
    started: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    #: ``interrupted after N of M claimed clauses`` when Ctrl-C stopped the run, or "".
    interrupted: str = ""
    #: The clauses a selection left out (``clauses=``, ``-k``): counted, not listed, by
    #: the summary; the rest of ``not_run`` were selected and not reached.
    deselected: tuple[str, ...] = ()

    def count(self, outcome: Outcome) -> int:
        return sum(r.outcome == outcome for r in self.results)

    @property
    def ok(self) -> bool:
        """Every claimed clause that ran passed (skips and unclaimed clauses aside), and
        the run was not interrupted."""
        return not self.interrupted and not any(r.outcome in ("failed", "error") for r in self.results)

    @property
    def ran(self) -> bool:
        """Some selected clause was claimed by the store (a selection that ran nothing
        is exit status 5, as in pytest)."""
        return any(r.outcome != "not claimed" for r in self.results)

    def failures(self) -> list[ClauseResult]:
        """Failed and errored clauses, the most specific first: a clause that names a
        cause (a batch written item by item) before one whose failure is usually its
        symptom (the clear race, the state machine: ``Clause.symptom``), else in run order."""
        from storetest.clauses import CLAUSES

        symptoms = {c.name for c in CLAUSES if c.symptom}
        failed = [r for r in self.results if r.outcome in ("failed", "error")]
        return sorted(failed, key=lambda r: r.clause in symptoms)

    def claimed(self) -> list[ClauseResult]:
        """The rows a table shows: every result but the clauses the store does not claim."""
        return [r for r in self.results if r.outcome != "not claimed"]

    def not_claimed(self) -> dict[str, list[str]]:
        """Clauses the store does not claim, by what it lacks (``{"entry log": [...]}``)."""
        out: dict[str, list[str]] = {}
        for r in self.results:
            if r.outcome == "not claimed":
                named = [name for cap, name in CAPABILITY_NAMES.items() if cap in r.lacks]
                lacks = named[-1] if named else " and ".join(r.lacks) or r.diagnosis
                out.setdefault(lacks, []).append(r.clause)
        return out

    def not_claimed_line(self) -> str:
        """``not claimed: steers (4 clauses), entry log (13)``, or "" when every clause is claimed."""
        groups = self.not_claimed()
        if not groups:
            return ""
        parts = [f"{lacks} ({len(names)}{(' clause' if len(names) == 1 else ' clauses') if i == 0 else ''})"
                 for i, (lacks, names) in enumerate(groups.items())]
        return "not claimed: " + ", ".join(parts)

    def replay(self, clause: str | None = None) -> list[str]:
        """``storetest check`` options that rerun this run (or one clause) with the
        same inputs and the same session ids."""
        args = ["--seed", str(self.seed), "--nonce", self.nonce, "--profile", self.profile]
        return [*args, "-k", clause] if clause else args

    @property
    def not_reached(self) -> tuple[str, ...]:
        """Selected clauses that did not run: the set-up failed, or Ctrl-C stopped the run."""
        left_out = set(self.deselected)
        return tuple(n for n in self.not_run if n not in left_out)

    def selected(self) -> int:
        """How many clauses the selection kept: every verdict, and those not reached."""
        return len(self.results) + len(self.not_reached)

    def summary(self) -> str:
        """``69 clauses: 40 passed, 0 failed, 5 skipped; 24 not claimed``, or with a
        selection ``4 of 69 clauses selected (65 deselected): 0 passed, 1 failed; 3 not
        claimed``. The counts before the first ``;`` and the not-claimed count add up to
        the clauses selected; the store does not claim some (not tests, not failures)."""
        return summary_line(Counter(r.outcome for r in self.results), len(self.not_reached), len(self.deselected),
                            self.interrupted)

    def __str__(self) -> str:
        return render_text(self)


def versions() -> dict[str, str]:
    """The versions that make a verdict: Python's, storetest's and Hypothesis's (from
    their metadata: nothing is imported)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for package in ("storetest", "hypothesis"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "unknown"
    return out


def summary_line(counts: Mapping[str, int], not_reached: int, deselected: int, interrupted: str = "") -> str:
    """The summary of a run from its counts by outcome (see :meth:`Report.summary`)."""
    selected = sum(counts.values()) + not_reached
    if not selected and interrupted:
        return interrupted  # stopped before any clause
    parts = [f"{counts.get('passed', 0)} passed", f"{counts.get('failed', 0)} failed"]
    for outcome, label in (("error", "error"), ("skipped", "skipped"), ("interrupted", "interrupted")):
        if counts.get(outcome):
            parts.append(f"{counts[outcome]} {label}")
    if not_reached:
        parts.append(f"{not_reached} not reached")
    head = (f"{selected} of {selected + deselected} clauses selected ({deselected} deselected)" if deselected
            else f"{selected} clauses")
    line = f"{head}: " + ", ".join(parts)
    if counts.get("not claimed"):
        line += f"; {counts['not claimed']} not claimed"
    return f"{line}; {interrupted}" if interrupted else line


def interrupted_line(counts: Mapping[str, int], not_reached: int) -> str:
    """``interrupted after N of M claimed clauses``: N have a verdict (passed, failed,
    an error or skipped), M are those and the clause interrupted and those not reached;
    the clauses the store does not claim are in neither."""
    done = sum(counts.get(o, 0) for o in ("passed", "failed", "error", "skipped"))
    return f"interrupted after {done} of {done + counts.get('interrupted', 0) + not_reached} claimed clauses"


def _header(report: Report) -> str:
    caps = ", ".join(report.capabilities) or (
        "unknown: no store was made" if report.stopped or not report.results else "none found")
    seeded = f"seed {report.seed}, nonce {report.nonce}" if report.nonce else "no seed used"
    line = f"{report.name}: {report.summary()} (claims: {caps}; {seeded})"
    partial = "; ".join(f"{cap} only in part (has {', '.join(ms)})" for cap, ms in report.partial.items())
    return f"{line}\n  note: {partial}" if partial else line


def render_text(report: Report, width: int = 100) -> str:
    """A row per claimed clause (a failure's diagnosis follows on its own wrapped
    lines), then one line for the clauses the store does not claim."""
    lines = [_header(report)]
    if not report.results:
        return "\n".join(lines)
    shown = report.claimed()
    # A set-up error is the run's, not the clause that happened to come first.
    names = [SETUP_ROW if r.setup else r.clause for r in shown]
    name_width = max((len(n) for n in names), default=0)
    for r, name in zip(shown, names, strict=True):
        lines.append(f"  {SHOWN[r.outcome]:5} {name:<{name_width}}  {r.seconds:6.2f}s")
        if r.diagnosis:  # a passed clause says what it found (a crash clause its kills)
            lines += textwrap.wrap(r.diagnosis, max(40, width - 2), initial_indent="        ",
                                   subsequent_indent="        ")
        for limit in r.limits:
            lines += textwrap.wrap(f"limit: {limit}", max(40, width - 2), initial_indent="        ",
                                   subsequent_indent="          ")
    if report.not_claimed_line():
        lines.append("  " + report.not_claimed_line())
    missed = report.not_reached
    if missed and report.stopped:
        lines.append(f"  not reached ({len(missed)}): the set-up fails before any clause")
    elif missed:
        lines += textwrap.wrap(f"not reached ({len(missed)}): {', '.join(missed)}", max(40, width - 2),
                               initial_indent="  ", subsequent_indent="        ")
    return "\n".join(lines)


#: The row of a set-up error (a factory, an opener or a binding gave no store).
SETUP_ROW: Final = "set-up (no clause ran)"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped :func:`storetest.check`: ``report`` holds every verdict so far, the
    clause in flight as ``interrupted`` (never an error of the store) and the clauses
    after it as not run. A KeyboardInterrupt, so a script that does not catch it stops
    as Ctrl-C stops any Python program (exit status 130)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        super().__init__(report.interrupted)
