"""The input-space model's cells are all reached by the default profile: on every one
of three seeds, since every cell is reached by fixed cases (deterministic). Many-seed
runs live in ``scripts/coverage_table.py --seeds N``."""

from __future__ import annotations

from collections import Counter

import pytest

from storetest._engine import inputs
from storetest._engine.inputs import Cell, Coverage, cells
from tests.instrumented import measure

SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def per_seed() -> list[Counter[Cell]]:
    return [measure(seed) for seed in SEEDS]


def test_every_cell_is_reached_on_every_seed(per_seed: list[Counter[Cell]]) -> None:
    missed = {str(cell): [s for s, run in zip(SEEDS, per_seed, strict=True) if not run[cell]]
              for cell in cells() if not all(run[cell] for run in per_seed)}
    assert not missed, f"{len(missed)} cell(s) not reached on every seed: " + "; ".join(
        f"{cell} (missed on seeds {seeds})" for cell, seeds in list(missed.items())[:20])


def test_the_model_covers_every_transcript_field_and_dimension() -> None:
    """Each dimension of the issue has cells: the report cannot pass by being empty."""
    dimensions = {(c.field, c.dimension) for c in cells()}
    for spec in inputs.FIELDS:
        assert (spec.name, "size in bytes") in dimensions
        if spec.families:
            assert (spec.name, "characters") in dimensions
    assert {d for _, d in dimensions} >= {"size in bytes", "size in characters", "characters", "JSON",
                                         "prefix under a separator", "escape or normalization", "whitespace",
                                         "volume", "separator inside a component"}
    assert sum(1 for c in cells() if c.dimension == "prefix under a separator") == len(inputs.PUNCTUATION)


def test_the_classifier_counts_only_what_reaches_a_cell() -> None:
    """A value one byte off a ladder size, or a byte cell without a multibyte character
    last, reaches no size cell; a prefix pair needs both ids."""
    cov = Coverage()
    spec = next(s for s in inputs.FIELDS if s.name == "message text")
    cov.value("transcripts", "message text", "b" * 4096)  # 4,096 characters, but no multibyte last
    cov.value("transcripts", "message text", "b" * 4094 + "é")  # 4,096 bytes, 4,095 characters
    cov.value("transcripts", "session id", "p-x/y")
    counts = cov.finish()
    hit = {c.name for c in counts if c.field == spec.name}
    assert hit == {"4,096 characters", "4,096 bytes", "4,095 characters"}
    assert not any(c.dimension == "prefix under a separator" for c in counts)
    cov = Coverage()
    for session in ("p-x", "p-x/y", "p-%41", "p-A", "\u3000p-w", "p-w"):
        cov.value("transcripts", "session id", session)
    names = {c.name for c in cov.finish()}
    assert {"x and x/y", "percent", "leading U+3000"} <= names


def test_the_ladders_have_the_model_sizes() -> None:
    assert inputs.ladder(20) == [0, 1, 7, 8, 9, 15, 16, 17]
    for n in (4, 255, 256, 4097):
        value = inputs.bytes_value(n)
        assert len(value.encode()) == n and ord(value[-1]) > 0x7F
        assert len(inputs.chars_value(n)) == n
        assert len(inputs.chars_value(n).encode()) >= 2 * n


def test_the_coverage_page_lists_every_cell() -> None:
    """docs/coverage.md (scripts/coverage_table.py --write) names every cell of the model
    and no other: it goes stale when a field or a dimension is added."""
    from pathlib import Path

    from storetest._engine import topologies

    every = cells() + topologies.cells()
    page = (Path(__file__).resolve().parent.parent / "docs" / "coverage.md").read_text(encoding="utf-8")
    listed = [line for line in page.splitlines() if line.startswith(tuple(f"| {c.protocol} / " for c in every))]
    assert len(listed) == len(every), "docs/coverage.md is stale: run python scripts/coverage_table.py --write"
    assert f"| **all** | | | **{len(every)}** | **{len(every)}** | |" in page
