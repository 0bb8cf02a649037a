"""scripts/langgraph_head_to_head.py's core on two broken savers: storetest catches each
with the clause meant for it; LangGraph's conformance suite misses the colon-joined
keys (plainredis's bug) and catches the ignored filter (lmdb's) with its filter tests,
as the table in docs/ecosystem.md says; the row and the block say so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _script() -> Any:
    path = ROOT / "scripts" / "langgraph_head_to_head.py"
    spec = importlib.util.spec_from_file_location("langgraph_head_to_head", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_storetest_catches_both_and_langgraphs_suite_misses_the_colon_joined_keys() -> None:
    h2h = _script()
    chosen = {s.name: s for s in h2h.subjects(include_references=False)
              if s.name in ("cp-colon-joined-keys", "cp-filter-ignored")}
    results = {}
    with h2h._fixtures() as fixture:
        for name, subject in chosen.items():
            theirs = h2h.run_theirs(subject, fixture)
            ours = h2h.run_ours(subject, seed=1, clauses=[subject.clause])
            assert ours.failed == [subject.clause], (name, ours)
            assert not theirs.error and theirs.capabilities, (name, theirs)
            results[name] = (subject, theirs, ours)
    _, colon, _ = results["cp-colon-joined-keys"]
    assert colon.failed == 0 and colon.passed > 50, colon
    _, filtered, _ = results["cp-filter-ignored"]
    assert "list: test_list_metadata_filter_single_key" in filtered.failures, filtered
    assert h2h.verdict(*results["cp-colon-joined-keys"]) == "storetest only"
    assert h2h.verdict(*results["cp-filter-ignored"]) == "both"
    block = h2h.table(list(results.values()), seed=1)
    assert "LangGraph's suite catches 1 and misses 1: `cp-colon-joined-keys`." in block, block
    assert "| **`checkpoint_threads_and_namespaces_are_isolated`** | storetest only |" in block, block
    docs = (ROOT / "docs" / "ecosystem.md").read_text(encoding="utf-8")
    for name in ("cp-colon-joined-keys", "cp-filter-ignored"):  # the published verdict is this run's
        (published,) = [line for line in docs.splitlines() if line.startswith(f"| `{name}`:")]
        assert published.split(" | ")[3] == h2h.row(*results[name]).split(" | ")[3], published


def test_the_block_replaces_the_old_one_or_goes_at_the_end_of_the_langgraph_section() -> None:
    h2h = _script()
    section = "<!-- sdk:langgraph -->\n## LangGraph\n<!-- /sdk:langgraph -->\n"
    placed = h2h.place(f"{h2h.START}\nnew\n{h2h.END}", section)
    assert placed.index("new") < placed.index("<!-- /sdk:langgraph -->"), placed
    again = h2h.place(f"{h2h.START}\nnewer\n{h2h.END}", placed)
    assert "newer" in again and "\nnew\n" not in again, again
