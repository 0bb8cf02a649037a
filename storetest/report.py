"""The conformance report: a row per clause with its verdict and one-line diagnosis,
rendered for the terminal, as Markdown, or as JSON. Pure functions over
:class:`~storetest.runner.Report`; the plugin and the command feed them."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from storetest.runner import Report

__all__ = ["render", "render_json", "render_markdown", "render_text"]

_SHOWN: Final = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "not claimed": "n/c", "error": "ERROR"}
JSON_FORMAT: Final = 1


def _header(report: Report) -> str:
    caps = ", ".join(report.capabilities) or "none found"
    line = f"{report.name}: {report.summary()} (claims: {caps}; seed {report.seed}, nonce {report.nonce})"
    partial = "; ".join(f"{cap} only in part (has {', '.join(ms)})" for cap, ms in report.partial.items())
    return f"{line}\n  note: {partial}" if partial else line


def render_text(report: Report, width: int = 100) -> str:
    """A row per clause; a failure's diagnosis follows on its own wrapped lines."""
    lines = [_header(report)]
    if not report.results:
        return lines[0]
    name_width = max(len(r.clause) for r in report.results)
    for r in report.results:
        lines.append(f"  {_SHOWN[r.outcome]:5} {r.clause:<{name_width}}  {r.seconds:6.2f}s")
        if r.diagnosis and r.outcome != "passed":
            lines += textwrap.wrap(r.diagnosis, max(40, width - 2), initial_indent="        ",
                                   subsequent_indent="        ")
    if report.not_run:
        lines.append(f"  not run: {', '.join(report.not_run)}")
    return "\n".join(lines)


def render_markdown(reports: Sequence[Report]) -> str:
    lines = ["# storetest conformance report", ""]
    for report in reports:
        lines += [f"## {report.name}", "", f"Profile `{report.profile}`, seed `{report.seed}`, nonce "
                  f"`{report.nonce}`. Claims: {', '.join(report.capabilities) or 'none found'}.", "",
                  report.summary(), "", "| clause | result | diagnosis |", "|---|---|---|"]
        for r in report.results:
            diagnosis = r.diagnosis.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{r.clause}` | {_SHOWN[r.outcome]} | {diagnosis} |")
        if report.not_run:
            lines += ["", f"Not run: {', '.join(f'`{n}`' for n in report.not_run)}."]
        lines.append("")
    return "\n".join(lines)


def _as_json(report: Report) -> dict[str, Any]:
    return {
        "name": report.name,
        "profile": report.profile,
        "seed": report.seed,
        "nonce": report.nonce,
        "capabilities": list(report.capabilities),
        "totals": {o: report.count(o) for o in _SHOWN} | {"not run": len(report.not_run)},  # type: ignore[arg-type]
        "summary": report.summary(),
        "clauses": [asdict(r) for r in report.results],
        "not_run": list(report.not_run),
    }


def render_json(reports: Sequence[Report]) -> str:
    return json.dumps({"format": JSON_FORMAT, "runs": [_as_json(r) for r in reports]}, indent=2,
                      ensure_ascii=False)


def render(reports: Sequence[Report], path: str) -> str:
    """The report in the format the file name asks for: ``.json``, else Markdown."""
    return render_json(reports) if path.endswith(".json") else render_markdown(reports)
