"""Google ADK's session services through the ADK binding: each runnable contender fails
exactly the clauses its DEFECTS name, on a new seed each run, so docs/ecosystem.md's ADK
rows still hold (about 25 s; tests/ecosystem/test_repros.py runs the repros)."""

from __future__ import annotations

import random

import pytest

from storetest import check
from tests.ecosystem.adk import CONTENDERS, DEFECTS
from tests.ecosystem.common import Contender

RUNNABLE = [c for c in CONTENDERS if c.binding is not None]


@pytest.mark.parametrize("contender", RUNNABLE, ids=lambda c: c.name)
def test_a_contender_fails_exactly_its_defects(contender: Contender, request: pytest.FixtureRequest) -> None:
    seed = random.randrange(2**32)
    report = check(contender.binding(), seed=seed, fixtures=request.getfixturevalue, name=contender.name)
    failed = {r.clause for r in report.results if r.outcome in ("failed", "error")}
    listed = {d.clause for d in DEFECTS if d.contender == contender.name}
    assert failed == listed, f"seed {seed}: failed {sorted(failed)}, DEFECTS list {sorted(listed)}\n{report}"
