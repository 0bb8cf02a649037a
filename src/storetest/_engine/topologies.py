"""The input-space model for shapes of use and protocol options, beside the model for
values (:mod:`storetest._engine.inputs`): the cells a default check must reach that are
not values but how the store is used (which handles, from which factory calls, on
which backends, how many callers of each kind at once, in which processes), and the
options of every protocol method at their edges.

A cell is reached when a correct store *sees* it happen, not when a clause says it
tried: the instrumented stores of ``tests/instrumented_topologies.py`` count callers in
flight at once, the factory calls and backends behind each session id, the
constructors running together, and each option's value against what the session holds
(``num_recent_events`` against its event count, ``after_timestamp`` against its
events' timestamps). ``scripts/coverage_table.py`` reports these rows beside the value
cells, and ``tests/test_topology_coverage.py`` fails when one is not reached.

Protocols without options beyond these: a LangChain chat history's methods take none
(``messages``, ``add_messages``, ``clear``); the transcript protocol's take none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from storetest._engine.inputs import Cell

__all__ = ["ADDERS_AGAINST_A_CLEAR", "OPTION_CELLS", "RACERS", "Shapes", "cells"]

#: Callers of one kind at once, each on a handle of its own (a factory call of its own).
RACERS: Final = 8
#: Adders racing one clear (1: the pair alone).
ADDERS_AGAINST_A_CLEAR: Final = (1, 4, RACERS)
#: Takers of one steer queue at once (``steers_are_taken_exactly_once_under_concurrency``).
TAKERS: Final = 4
#: Handles constructing on one fresh backend at once.
CONSTRUCTORS: Final = 4

_TOPOLOGY: Final = "topology"

#: (protocol, field, option value relative to the session) cells.
OPTION_CELLS: Final[tuple[tuple[str, str, str], ...]] = (
    *(("items", "get_items(limit)", f"limit {n}") for n in ("0", "1", "N (the item count)", "N + 1", "none")),
    *(("adk", "GetSessionConfig.num_recent_events", f"{n}") for n in ("0", "1", "N (the event count)", "N + 1")),
    *(("adk", "GetSessionConfig.after_timestamp", where) for where in (
        "before the first event", "at an event's timestamp", "between two events", "after the last event")),
    ("adk", "GetSessionConfig", "num_recent_events and after_timestamp together"),
    ("adk", "list_sessions", "by app and user"),
    ("adk", "list_sessions", "by app, every user"),
    ("adk", "list_sessions", "a listed session that holds events"),
)


def _topology_cells() -> list[Cell]:
    out = [Cell("items", "handles", _TOPOLOGY, name) for name in (
        "several callers on one handle at once",
        "two factory calls on one backend, one session id",
        "two fresh backends, one session id",
    )]
    out += [Cell("items", "racers", _TOPOLOGY, f"{k} adder(s) against a clear") for k in ADDERS_AGAINST_A_CLEAR]
    out += [Cell("items", "racers", _TOPOLOGY, f"{RACERS} poppers, each on a handle of its own"),
            Cell("items", "racers", _TOPOLOGY, f"{RACERS} writers of one session, each on a handle of its own"),
            Cell("items", "processes", _TOPOLOGY, "writers in two or more child processes")]
    out += [Cell("chat histories", "fresh backend", _TOPOLOGY, name) for name in (
        f"{CONSTRUCTORS} constructors at once", f"{CONSTRUCTORS} first calls at once, constructed before",
        "a constructor while another handle's first call runs")]
    out += [Cell("transcripts", "racers", _TOPOLOGY, f"{TAKERS} takers of one queue")]
    out += [Cell("adk", "handles", _TOPOLOGY, "two factory calls on one backend, one session")]
    return out


def cells() -> list[Cell]:
    """Every topology and option cell."""
    return _topology_cells() + [Cell(p, f, "option", name) for p, f, name in OPTION_CELLS]


@dataclass
class Shapes:
    """What instrumented stores saw, cell by cell: they call these as calls start and end."""

    counts: Counter[Cell] = field(default_factory=Counter)
    #: (protocol, session) -> {(backend, handle)}
    _touched: dict[tuple[str, str], set[tuple[str, int]]] = field(default_factory=dict)
    #: (protocol, session) -> [(kind, handle)] of calls in flight
    _flight: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    _pids: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._cells = {(c.protocol, c.field, c.name): c for c in cells()}

    def hit(self, protocol: str, field_name: str, name: str) -> None:
        cell = self._cells.get((protocol, field_name, name))
        if cell is None:
            raise KeyError(f"no cell {protocol} / {field_name} / {name}")
        self.counts[cell] += 1

    def enter(self, protocol: str, session: str, kind: str, backend: str, handle: int) -> None:
        """A call of ``kind`` on ``session`` through ``handle`` (a factory call) on ``backend`` started."""
        self._touched.setdefault((protocol, session), set()).add((backend, handle))
        flight = self._flight.setdefault((protocol, session), [])
        flight.append((kind, handle))
        kinds = Counter(k for k, _ in flight)
        handles_of = {k: {h for kk, h in flight if kk == k} for k in kinds}
        if protocol == "items" and len({h for _, h in flight}) < len(flight):
            self.hit(protocol, "handles", "several callers on one handle at once")
        if protocol == "items":
            if kinds["clear"]:
                for k in ADDERS_AGAINST_A_CLEAR:
                    if kinds["add"] >= k:
                        self.hit("items", "racers", f"{k} adder(s) against a clear")
            if len(handles_of.get("pop", ())) >= RACERS:
                self.hit("items", "racers", f"{RACERS} poppers, each on a handle of its own")
            if len(handles_of.get("add", ())) >= RACERS:
                self.hit("items", "racers", f"{RACERS} writers of one session, each on a handle of its own")
        if protocol == "transcripts" and kinds["take"] >= TAKERS:
            self.hit("transcripts", "racers", f"{TAKERS} takers of one queue")
        touched = self._touched[protocol, session]
        backends = {b for b, _ in touched}
        if len(backends) >= 2 and protocol == "items":
            self.hit("items", "handles", "two fresh backends, one session id")
        if any(len({h for b2, h in touched if b2 == b}) >= 2 for b in backends):
            if protocol == "items":
                self.hit("items", "handles", "two factory calls on one backend, one session id")
            elif protocol == "adk":
                self.hit("adk", "handles", "two factory calls on one backend, one session")

    def leave(self, protocol: str, session: str, kind: str, handle: int) -> None:
        self._flight[protocol, session].remove((kind, handle))

    def writer_process(self, pid: int) -> None:
        """An item was written from process ``pid`` (not the run's own)."""
        self._pids.add(pid)
        if len(self._pids) >= 2:
            self.hit("items", "processes", "writers in two or more child processes")

    def finish(self) -> Counter[Cell]:
        return self.counts
