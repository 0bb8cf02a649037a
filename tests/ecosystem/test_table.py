"""scripts/ecosystem_table.py on contenders of our own (no SDK, no database): a failure
without a repro is flagged, a failure with one links it, a binding that raises is an
error row, a store that cannot run says why, and --sdk keeps the other sections."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.broken_stores.item_variants import BROKEN
from tests.ecosystem.common import Contender, Defect

ROOT = Path(__file__).resolve().parent.parent.parent
CLAUSE = "get_items_gives_the_latest"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("ecosystem_table", ROOT / "scripts" / "ecosystem_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _failing_binding() -> Any:
    (broken,) = [b for b in BROKEN if b.name == "items-limit-returns-oldest"]
    return broken.factory


def _raising_binding() -> Any:
    raise RuntimeError("the SDK changed its constructor")


def _sdk(defects: list[Defect]) -> types.ModuleType:
    module = types.ModuleType("tests.ecosystem.fake")
    module.TITLE = "A fake SDK"  # type: ignore[attr-defined]
    module.CONTENDERS = [  # type: ignore[attr-defined]
        Contender("Oldest first", "fake", _failing_binding, clauses=(CLAUSE,)),
        Contender("Broken binding", "fake", _raising_binding),
        Contender("Cloud only", "fake", None, not_runnable="needs a paid API"),
    ]
    module.DEFECTS = defects  # type: ignore[attr-defined]
    return module


def _section(defects: list[Defect]) -> tuple[str, list[str]]:
    table = _script()
    module = _sdk(defects)
    rows = [table.run_contender(c, seed=1, profile="fast") for c in module.CONTENDERS]
    return table.render_section("fake", module, rows)  # type: ignore[no-any-return]


def test_a_failure_without_a_repro_is_flagged_and_errors_and_unrunnables_are_rows() -> None:
    text, unreviewed = _section([])
    assert unreviewed == [f"Oldest first: {CLAUSE}"]
    assert "no repro: a false alarm of ours until reviewed" in text
    assert f"| `{CLAUSE}` | [**FAIL**](#oldest-first) | error |" in text, text
    assert "- error: RuntimeError: the SDK changed its constructor" in text
    assert "- **Cloud only**: needs a paid API" in text


def test_a_failure_with_a_repro_links_it() -> None:
    defect = Defect("Oldest first", CLAUSE, "returns the oldest n", "tests/ecosystem/repros/x.py",
                    deterministic=True)
    text, unreviewed = _section([defect])
    assert unreviewed == []
    assert "Repro: [`tests/ecosystem/repros/x.py`](../tests/ecosystem/repros/x.py) (deterministic)" in text


def test_one_sdk_rewritten_the_others_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _script()
    out = tmp_path / "ecosystem.md"
    out.write_text("<!-- sdk:langchain -->\nkept\n<!-- /sdk:langchain -->\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "tests.ecosystem.adk", _sdk([]))
    monkeypatch.setattr(table, "versions", lambda module: ["none"])
    assert table.main(["--sdk", "adk", "--output", str(out), "--seed", "1"]) == 1  # unreviewed, and an error
    text = out.read_text(encoding="utf-8")
    assert text.index("<!-- sdk:langchain -->\nkept") < text.index("<!-- sdk:adk -->"), text


def test_the_head_to_head_block_is_kept_when_its_section_is_regenerated(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    table = _script()
    out = tmp_path / "ecosystem.md"
    block = "<!-- head-to-head:adk -->\n| kept |\n<!-- /head-to-head:adk -->"
    out.write_text(f"<!-- sdk:adk -->\nold\n{block}\n<!-- /sdk:adk -->\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "tests.ecosystem.adk", _sdk([]))
    monkeypatch.setattr(table, "versions", lambda module: ["none"])
    table.main(["--sdk", "adk", "--output", str(out), "--seed", "1"])
    text = out.read_text(encoding="utf-8")
    assert "\nold\n" not in text and text.count(block) == 1, text
    assert text.index("| `get_items_gives_the_latest` |") < text.index(block) < text.index("<!-- /sdk:adk -->"), text
