"""The topology and option cells (storetest._engine.topologies) are all reached by the
default profile, as correct instrumented stores see it (tests/instrumented_topologies.py):
callers of each kind in flight at once, factory calls and backends per session id,
constructors at once on a fresh backend, writers in child processes, each option's value
against what the session holds. Many seeds: ``scripts/coverage_table.py --seeds N``."""

from __future__ import annotations

from collections import Counter

import pytest

from storetest._engine import topologies
from storetest._engine.inputs import Cell
from storetest._engine.topologies import RACERS, Shapes
from tests.instrumented_topologies import measure_topologies

SEEDS = (1, 2, 3)
#: Cells reached only when callers happen to be in flight together: each must be reached
#: within the seeds (a loaded machine may serialize one round), the others on every seed.
RACY = ("at once", "against a clear", "each on a handle", "takers", "writers", "while another")


@pytest.fixture(scope="module")
def per_seed() -> list[Counter[Cell]]:
    return [measure_topologies(seed) for seed in SEEDS]


def test_every_topology_and_option_cell_is_reached(per_seed: list[Counter[Cell]]) -> None:
    def reached(cell: Cell) -> bool:
        hits = [bool(run[cell]) for run in per_seed]
        return any(hits) if any(word in cell.name for word in RACY) else all(hits)

    missed = {str(cell): [s for s, run in zip(SEEDS, per_seed, strict=True) if not run[cell]]
              for cell in topologies.cells() if not reached(cell)}
    assert not missed, "not reached: " + "; ".join(f"{cell} (seeds {seeds})" for cell, seeds in missed.items())


def test_the_model_has_the_issue_rows() -> None:
    """Every kind of racer, every handle topology, every option family has cells."""
    names = {c.name for c in topologies.cells()}
    assert {f"{k} adder(s) against a clear" for k in (1, 4, 8)} <= names
    assert {"two factory calls on one backend, one session id", "two fresh backends, one session id",
            "4 constructors at once", "4 first calls at once, constructed before",
            "a constructor while another handle's first call runs", "writers in two or more child processes",
            "4 takers of one queue"} <= names
    fields = {c.field for c in topologies.cells() if c.dimension == "option"}
    assert fields == {"get_items(limit)", "GetSessionConfig.num_recent_events", "GetSessionConfig.after_timestamp",
                      "GetSessionConfig", "list_sessions"}


def test_a_cell_needs_the_callers_in_flight_together() -> None:
    """Seven poppers on seven handles, or eight one after another, reach no 8-popper
    cell; eight in flight at once on eight handles do. A clear with no adder in
    flight reaches no adder cell; a session on one backend, no two-backend cell."""
    shapes = Shapes()
    for h in range(RACERS):
        shapes.enter("items", "s", "pop", "b", h)
        shapes.leave("items", "s", "pop", h)
    for h in range(RACERS - 1):
        shapes.enter("items", "s", "pop", "b", h)
    shapes.enter("items", "s", "clear", "b", 99)
    names = {c.name for c, n in shapes.finish().items() if n}
    assert not any("poppers" in n or "adder" in n or "two fresh" in n for n in names), names
    shapes.enter("items", "s", "pop", "b", RACERS)
    shapes.enter("items", "s", "add", "other backend", 100)
    names = {c.name for c, n in shapes.finish().items() if n}
    assert {f"{RACERS} poppers, each on a handle of its own", "1 adder(s) against a clear",
            "two fresh backends, one session id"} <= names
