"""The one list of clauses. Each clause module decorates its functions with
:func:`clause`, which records what the clause needs; the plugin, the command and
:func:`storetest.check` all read :data:`CLAUSES` and nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from storetest._engine.harness import CAPABILITIES, Target

__all__ = ["CLAUSES", "Clause", "clause", "clause_named"]


@dataclass(frozen=True)
class Clause:
    """A clause of the contract and what running it takes."""

    name: str
    run: Callable[[Target], None]
    #: Capabilities the store must claim (see ``storetest._engine.harness.CAPABILITIES``).
    needs: frozenset[str]
    #: Needs a second handle on the same data (``replica=``).
    replica: bool
    #: Its verdict depends on how calls interleave, which no seed pins: a replay runs
    #: the same inputs but not the same schedule.
    races: bool
    #: The module it lives in: content, transcripts, steers, replicas, model, ...
    topic: str
    #: Opens the store in child processes: the factory must be importable (module:function).
    processes: bool = False
    #: Runs only when the caller asks for an idle time (``check(idle=...)``).
    idle: bool = False
    #: Needs a factory that reopens the data from another process (``reopen=``).
    reopen: bool = False
    #: Mixes several operations (a state machine, a clear racing adds): its failure is
    #: usually the symptom of a bug another clause names as a cause, so a report shows
    #: it after the others (:meth:`storetest.Report.failures`).
    symptom: bool = False
    #: How long it takes, as a rank: 0 a typical clause (hundredths of a second), 1
    #: several times that (a ladder of large values, drawn transcripts), 2 the longest
    #: of its protocol (most often its state machine). A run shared between processes
    #: takes the dearest first, so no process is left running one alone at the end
    #: while the other waits (``storetest._engine.workers``).
    cost: int = 0

    @property
    def promise(self) -> str:
        """The first paragraph of its docstring, on one line."""
        return " ".join((self.run.__doc__ or "").strip().split("\n\n")[0].split())

    @property
    def exists_for(self) -> str:
        """The rest of its docstring (the real bugs it exists for), a paragraph a line."""
        paragraphs = (self.run.__doc__ or "").strip().split("\n\n")[1:]
        return "\n".join(" ".join(p.split()) for p in paragraphs)

    @property
    def doc(self) -> str:
        return self.run.__doc__ or ""


CLAUSES: list[Clause] = []
"""Every clause, in the order a run executes them (filled as the topic modules load)."""


def clause(
    *, needs: Iterable[str] = ("transcript",), replica: bool = False, races: bool = False,
    processes: bool = False, idle: bool = False, reopen: bool = False, symptom: bool = False,
    cost: int = 0,
) -> Callable[[Callable[[Target], None]], Callable[[Target], None]]:
    """Register the decorated function as a clause."""
    wanted = frozenset(needs)
    unknown = wanted - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}")

    def register(fn: Callable[[Target], None]) -> Callable[[Target], None]:
        if any(c.name == fn.__name__ for c in CLAUSES):
            raise ValueError(f"two clauses are named {fn.__name__!r}")
        topic = fn.__module__.rsplit(".", 1)[-1]
        CLAUSES.append(Clause(fn.__name__, fn, wanted, replica, races, topic, processes, idle, reopen, symptom, cost))
        return fn

    return register


def clause_named(name: str) -> Clause:
    """:raises KeyError: no clause has that name (the message lists them)."""
    for c in CLAUSES:
        if c.name == name:
            return c
    raise KeyError(f"no clause named {name!r}; the clauses are: {', '.join(c.name for c in CLAUSES)}")
