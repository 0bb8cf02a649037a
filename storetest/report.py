"""The conformance report: one row per clause with its result and one-line diagnosis,
rendered as a terminal table, Markdown or JSON. Pure functions; the plugin feeds them."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = ["ClauseResult", "render", "render_json", "render_markdown", "render_text"]

_SHOWN = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "error": "ERROR"}


@dataclass(frozen=True)
class ClauseResult:
    run: str
    clause: str
    outcome: str  # passed, failed, skipped, error
    diagnosis: str
    nodeid: str
    seconds: float
    seed: int | None = None


def _runs(results: Sequence[ClauseResult]) -> dict[str, list[ClauseResult]]:
    runs: dict[str, list[ClauseResult]] = {}
    for r in results:
        runs.setdefault(r.run, []).append(r)
    return runs


def _summary(rows: Sequence[ClauseResult]) -> str:
    counts = {k: sum(r.outcome == k for r in rows) for k in _SHOWN}
    parts = [f"{counts['passed']} passed", f"{counts['failed']} failed", f"{counts['skipped']} skipped"]
    if counts["error"]:
        parts.append(f"{counts['error']} errors")
    return f"{len(rows)} clauses: " + ", ".join(parts)


def render_text(results: Sequence[ClauseResult], width: int = 100) -> str:
    """A row per clause; a failure's diagnosis follows on its own wrapped lines."""
    lines = []
    for run, rows in _runs(results).items():
        lines.append(f"{run}: {_summary(rows)}")
        name_width = max(len(r.clause) for r in rows)
        for r in rows:
            lines.append(f"  {_SHOWN[r.outcome]:5} {r.clause:<{name_width}}  {r.seconds:6.2f}s")
            if r.diagnosis:
                lines += textwrap.wrap(r.diagnosis, max(40, width - 2), initial_indent="        ",
                                       subsequent_indent="        ")
    return "\n".join(lines)


def render_markdown(results: Sequence[ClauseResult], *, profile: str = "") -> str:
    lines = ["# storetest conformance report", ""]
    if profile:
        lines += [f"Hypothesis profile: `{profile}`.", ""]
    for run, rows in _runs(results).items():
        lines += [f"## {run}", "", _summary(rows), "", "| clause | result | diagnosis |", "|---|---|---|"]
        for r in rows:
            diagnosis = r.diagnosis.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{r.clause}` | {_SHOWN[r.outcome]} | {diagnosis} |")
        lines.append("")
    return "\n".join(lines)


def render_json(results: Sequence[ClauseResult], *, profile: str = "") -> str:
    return json.dumps(
        {
            "profile": profile,
            "runs": [
                {"name": run, "summary": _summary(rows), "clauses": [asdict(r) for r in rows]}
                for run, rows in _runs(results).items()
            ],
        },
        indent=2,
        ensure_ascii=False,
    )


def render(results: Sequence[ClauseResult], path: str, *, profile: str = "") -> str:
    """The report in the format the file name asks for: ``.json``, else Markdown."""
    if path.endswith(".json"):
        return render_json(results, profile=profile)
    return render_markdown(results, profile=profile)
