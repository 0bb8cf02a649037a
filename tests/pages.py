"""What the docs pages show, for the tests that check the pages' code is the code they run."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def run_conformance_lines(page: str) -> list[str]:
    """The bindings a docs page's code blocks pass to ``run_conformance``, whitespace folded."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks = [block.split("```", 1)[0] for block in text.split("```python")[1:]]
    # Block by block: a block's last call ends at its block, not at the next block's last ")".
    return [" ".join(call.rsplit(")", 1)[0].split()) for code in blocks for call in code.split("run_conformance(")[1:]]
