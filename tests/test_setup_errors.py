"""Set-up errors are one ERROR row, whatever returns the wrong thing (issue 44): a
factory returning None, a binding's opener returning None, a binding's factory raising.
The row is the set-up's, under no clause's name, and the run stops there. Before, an
opener returning None failed every clause it reached (19 FAIL rows, 51 s), and a
binding's factory error was filed under ``transcript_round_trips_exactly``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import storetest
from storetest.bindings.openai_agents import item_sessions
from storetest.results import render_text


def _no_opener() -> Any:
    raise RuntimeError("no database here")


def _chat_opener_none() -> Any:
    from storetest.bindings.langchain import chat_histories

    return chat_histories(lambda: lambda session_id: None)


CASES: dict[str, tuple[Callable[[], Any], str]] = {
    "a factory returning None": (lambda: lambda: None, "the factory returned None"),
    "an item opener returning None": (lambda: item_sessions(lambda: lambda session_id: None),
                                      "the factory's opener returned None for session"),
    "a chat opener returning None": (_chat_opener_none, "opener returned None for session"),
    "an item binding's factory raising": (lambda: item_sessions(_no_opener), "RuntimeError: no database here"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_set_up_error_is_one_row_under_no_clauses_name(case: str) -> None:
    make, said = CASES[case]
    if "chat" in case:
        pytest.importorskip("langchain_core")
    report = storetest.check(make(), seed=1)
    ran = [r for r in report.results if r.outcome not in ("not claimed", "skipped")]
    assert [(r.outcome, r.setup) for r in ran] == [("error", True)], str(report)
    assert said in ran[0].diagnosis, ran[0].diagnosis
    assert report.count("failed") == 0 and report.stopped
    text = render_text(report)
    (row,) = [line for line in text.splitlines() if line.startswith("  ERROR")]
    assert "set-up (no clause ran)" in row and ran[0].clause not in row, text
    assert "the set-up fails before any clause" in text and "claims: none found" not in text, text
