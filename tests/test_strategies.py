"""The input strategies (storetest._engine.strategies): made once, drawn many times."""

from __future__ import annotations

import itertools
import unicodedata
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from storetest._engine import strategies
from storetest.contract import Message
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


def test_replace_saves_put_loose_twins_where_the_previous_save_had_a_message() -> None:
    """The save-replaces clause's saves keep a prefix of the save before, then often put
    at the next position a twin of the message that was there: the same parts under
    another role, the same role with the text in another normalization or with a space,
    another tool call around the same text. An incremental save that compares messages
    that loosely keeps the old one; the clause sees the stale message."""
    seen: set[str] = set()

    def loose(old: Message, new: Message) -> str | None:
        """How ``new`` differs from ``old`` if only loosely, else ``None``."""
        if old == new:
            return None
        if old.content == new.content:
            return "role"
        if old.role != new.role or [type(p) for p in old.content] != [type(p) for p in new.content] or not old.content:
            return None
        a, b = getattr(old.content[0], "text", None), getattr(new.content[0], "text", None)
        if a is None or b is None:
            return None
        if a == b:
            return "other parts"
        if unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b):
            return "normalization"
        if a.strip() == b.strip():
            return "whitespace"
        return None

    @seed(5)
    @settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategies.replace_saves())
    def draw(saves: list[list[Message]]) -> None:
        assert 2 <= len(saves) <= 4
        for before, after in itertools.pairwise(saves):
            for old, new in zip(before, after, strict=False):
                kind = loose(old, new)
                if kind:
                    seen.add(kind)
                if old != new:
                    break

    draw()
    assert seen == {"role", "normalization", "whitespace", "other parts"}
