"""Google ADK's session services through the ADK binding: each runnable contender fails
exactly the clauses its DEFECTS name, and every defect's repro shows it through ADK's
own API (about 40 s in all, most of it the PostgreSQL rounds)."""

from __future__ import annotations

import importlib
import random

import pytest

from storetest import check
from tests.ecosystem.adk import CONTENDERS, DEFECTS

RUNNABLE = [c for c in CONTENDERS if c.binding is not None]


@pytest.mark.parametrize("contender", RUNNABLE, ids=lambda c: c.name)
def test_a_contender_fails_exactly_its_defects(contender, request: pytest.FixtureRequest) -> None:  # type: ignore[no-untyped-def]
    seed = random.randrange(2**32)
    report = check(contender.binding(), seed=seed, fixtures=request.getfixturevalue, name=contender.name)
    failed = {r.clause for r in report.results if r.outcome in ("failed", "error")}
    listed = {d.clause for d in DEFECTS if d.contender == contender.name}
    assert failed == listed, f"seed {seed}: failed {sorted(failed)}, DEFECTS list {sorted(listed)}\n{report}"


@pytest.mark.parametrize("defect", DEFECTS, ids=lambda d: f"{d.contender}:{d.clause}")
def test_a_defect_has_a_repro_that_shows_it(defect) -> None:  # type: ignore[no-untyped-def]
    assert defect.deterministic or defect.miss_rate, f"{defect.repro}: a provoked race must state its miss rate"
    module = defect.repro.removesuffix(".py").replace("/", ".")
    importlib.import_module(module).main()


def test_every_defect_names_a_contender_and_vertex_says_why_it_is_not_run() -> None:
    names = {c.name for c in CONTENDERS}
    assert {d.contender for d in DEFECTS} <= names
    (vertex,) = [c for c in CONTENDERS if c.binding is None]
    assert "Google Cloud" in vertex.not_runnable
