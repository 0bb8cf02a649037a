"""The input strategies (storetest._engine.strategies): made once, drawn many times."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from storetest._engine import strategies
from storetest.entries import Entry


def test_logs_makes_its_strategies_once_not_per_batch_or_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's id list and an entry's payload come from strategies made once a process
    (per size and id prefix; per kind): made per batch or entry, each new strategy is
    validated and its labels worked out again on its first draw, which was a fifth of the
    entry-log state machine's time. The parent choice is an entry's own (its elements are
    the batch's ids) and is not counted here."""
    made: Counter[str] = Counter()
    for name in ("lists", "builds"):
        real = getattr(st, name)

        def counting(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            made[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(st, name, counting)

    drawn: list[list[Entry]] = []

    @seed(3)
    @settings(max_examples=30, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategies.logs(max_size=6, first_parents=("p-root",), id_prefix="p-"))
    def draw(log: list[Entry]) -> None:
        drawn.append(log)

    draw()  # the first draws may make them (once a process)
    made.clear()
    drawn.clear()
    draw()
    assert sum(len(log) for log in drawn) > 30  # batches with entries of every kind were drawn
    assert {e.kind for log in drawn for e in log} == {"message", "meta", "custom", "compaction"}
    assert made == Counter(), f"strategies made again while drawing: {dict(made)}"
