"""The input-space model's cells are all reached by the default profile: on every one
of three seeds, since every cell is reached by fixed cases (deterministic). Many-seed
runs live in ``scripts/coverage_table.py --seeds N``."""

from __future__ import annotations

import json

import pytest

from storetest._engine import inputs
from storetest._engine.explain import COLUMN_WIDTHS
from storetest._engine.inputs import Coverage, cells
from tests.instrumented import measure

SEEDS = (1, 2, 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_cell_is_reached_on_every_seed(seed: int) -> None:
    """One test a seed, so xdist spreads them (about 25 s each, five stores)."""
    run = measure(seed)
    missed = [str(cell) for cell in cells("fast") if not run[cell]]
    assert not missed, f"seed {seed}: {len(missed)} cell(s) not reached: " + "; ".join(missed[:20])


def test_the_ci_profile_sends_the_16_mib_cells() -> None:
    """The 16 MiB cells are the ci profile's (not the default's): large_values_round_trip
    sends them there, and only there."""
    huge = {c for c in cells() if c.profile == "ci"}
    assert len(huge) == 6 and not huge & set(cells("fast")) and huge <= set(cells("ci"))
    cov = Coverage()
    for text in inputs.huge_values():
        cov.value("transcripts", "message text", text)
    assert huge <= set(cov.finish())


def test_the_model_covers_every_protocol_field_and_dimension() -> None:
    """Each protocol and dimension of the issue has cells: the report cannot pass by
    being empty. Every field without a limit runs its ladder to 1 MiB + 1."""
    dimensions = {(c.protocol, c.field, c.dimension) for c in cells()}
    assert {s.protocol for s in inputs.FIELDS} == {"transcripts", "entry logs", "item histories", "chat histories",
                                                   "adk"}
    for spec in inputs.FIELDS:
        assert (spec.protocol, spec.name, "size in bytes") in dimensions
        if spec.families:
            assert (spec.protocol, spec.name, "characters") in dimensions
        if spec.ids:
            assert (spec.protocol, spec.name, "prefix under a separator") in dimensions
        if spec.limit is None:
            assert spec.sizes()[-3:] == [2**20 - 1, 2**20, 2**20 + 1]
    for protocol in ("entry logs", "item histories", "chat histories"):
        assert (protocol, "session id", "escape or normalization") in dimensions
    assert ("adk", "state key", "prefix under a separator") in dimensions
    assert {d for _, _, d in dimensions} >= {"size in bytes", "size in characters", "characters", "JSON",
                                         "prefix under a separator", "escape or normalization", "whitespace",
                                         "volume", "separator inside a component"}
    assert sum(1 for c in cells() if c.dimension == "prefix under a separator") == \
        len(inputs.PUNCTUATION) * sum(1 for s in inputs.FIELDS if s.ids)


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


def test_the_clear_relations_are_the_model_relations() -> None:
    """The clear and delete clauses draw their ids from :func:`inputs.clear_relations`:
    one pair for every relation cell of an id (each separator, escape pair, case,
    whitespace), each pair reaching its own cell, no id both cleared and kept, every id
    one of :func:`inputs.related_ids`."""
    relations = inputs.clear_relations("p-")
    relation_cells = {c.name for c in cells() if (c.protocol, c.field) == ("transcripts", "session id")
                      and c.dimension in ("prefix under a separator", "escape or normalization", "whitespace")}
    assert {r.relation for r in relations} == relation_cells and "case" in relation_cells
    assert not {r.cleared for r in relations} & {r.kept for r in relations}
    assert {s for r in relations for s in (r.cleared, r.kept)} <= set(inputs.related_ids("p-"))
    for r in relations:
        cov = Coverage()
        cov.value("transcripts", "session id", r.cleared)
        cov.value("transcripts", "session id", r.kept)
        assert r.relation in {c.name for c in cov.finish()}, r
        assert repr(r.kept) in r.describe() or r.relation in r.describe()


def test_the_ladders_have_the_model_sizes() -> None:
    assert inputs.ladder(20) == [0, 1, 7, 8, 9, 15, 16, 17]
    # Past 64 KiB + 1, four values a power of two reach its three character and three
    # byte cells, each byte cell with its multibyte character last; JSON text stays JSON.
    for spec in (inputs.spec("item histories", "message content"), inputs.spec("entry logs", "custom data")):
        cov = Coverage()
        for value in inputs.large_values(spec):
            cov.value(spec.protocol, spec.name, value)
        reached = {c.name for c in cov.finish()}
        assert {f"{n:,} {unit}" for k in inputs.LARGE_K for n in (2**k - 1, 2**k, 2**k + 1)
                for unit in ("bytes", "characters")} <= reached
    assert all(json.loads(v) for v in inputs.large_values(inputs.spec("entry logs", "custom data")))
    for n in (4, 255, 256, 4097):
        value = inputs.bytes_value(n)
        assert len(value.encode()) == n and ord(value[-1]) > 0x7F
        assert len(inputs.chars_value(n)) == n
        assert len(inputs.chars_value(n).encode()) >= 2 * n


def test_past_64_kib_the_ladder_stands_where_a_known_limit_does() -> None:
    """Past 64 KiB + 1 a field's ladder has cells around 1 MiB only (LARGE_K): every
    known width (explain's COLUMN_WIDTHS) up to 1 MiB + 1 has its cells, no power of two
    from 2^17 to 2^19 has any, and each value past 64 KiB + 1 is longer than 512 KiB, so
    a cut at any width from 64 KiB to 512 KiB still cuts every one of them."""
    unbounded = inputs.spec("transcripts", "message text")
    large = [n for n in unbounded.sizes() if n > inputs.CHEAP_LIMIT]
    assert large == [2**20 - 1, 2**20, 2**20 + 1]
    for width in COLUMN_WIDTHS:
        if inputs.CHEAP_LIMIT < width <= unbounded.size_limit:
            assert {width - 1, width, width + 1} <= set(large), width
    for k in (17, 18, 19):
        assert not {c for c in cells() if c.name in (f"{2**k:,} bytes", f"{2**k:,} characters")}
    assert min(len(v.encode()) for v in inputs.large_values(unbounded)) > 2**19
    assert len(inputs.large_bytes(inputs.spec("transcripts", "attachment data"))) == 3


def test_the_coverage_page_lists_every_cell() -> None:
    """docs/coverage.md (scripts/coverage_table.py --write) names every cell of the model
    and no other: it goes stale when a field or a dimension is added."""
    from pathlib import Path

    from storetest._engine import topologies

    every = cells("fast") + topologies.cells()
    page = (Path(__file__).resolve().parent.parent / "docs" / "coverage.md").read_text(encoding="utf-8")
    protocols = {c.protocol for c in every}
    listed = [line for line in page.splitlines() if any(line.startswith(f"| {p} / ") for p in protocols)]
    n = len(every)
    assert len(listed) == n, "docs/coverage.md is stale: run python scripts/coverage_table.py --write"
    assert f"| **all** | | | **{n}** | **{n}** | |" in page
