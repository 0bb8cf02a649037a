"""The conformance report: a row per clause with its verdict and one-line diagnosis,
rendered for the terminal, as Markdown, as JSON, or as one self-contained HTML file.
Pure functions over :class:`~storetest.runner.Report`; the plugin and the command feed
them. Rows are always in clause order; clauses that did not run are listed."""

from __future__ import annotations

import html
import json
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Final

from storetest.failures import clause_link

if TYPE_CHECKING:
    from storetest.runner import ClauseResult, Report

__all__ = ["JSON_FORMAT", "render", "render_html", "render_json", "render_markdown", "render_text"]

SHOWN: Final = {"passed": "pass", "failed": "FAIL", "skipped": "skip", "not claimed": "n/c", "error": "ERROR"}
#: Bumped when a key of the JSON report changes meaning or goes away.
JSON_FORMAT: Final = 2


def _header(report: Report) -> str:
    caps = ", ".join(report.capabilities) or "none found"
    line = f"{report.name}: {report.summary()} (claims: {caps}; seed {report.seed}, nonce {report.nonce})"
    partial = "; ".join(f"{cap} only in part (has {', '.join(ms)})" for cap, ms in report.partial.items())
    return f"{line}\n  note: {partial}" if partial else line


def render_text(report: Report, width: int = 100) -> str:
    """A row per clause; a failure's diagnosis follows on its own wrapped lines."""
    lines = [_header(report)]
    if not report.results:
        return "\n".join(lines)
    shown = [r for r in report.results if r.outcome != "not claimed"]
    name_width = max((len(r.clause) for r in shown), default=0)
    for r in shown:
        lines.append(f"  {SHOWN[r.outcome]:5} {r.clause:<{name_width}}  {r.seconds:6.2f}s")
        if r.diagnosis and r.outcome != "passed":
            lines += textwrap.wrap(r.diagnosis, max(40, width - 2), initial_indent="        ",
                                   subsequent_indent="        ")
    # Clauses of a contract the store does not keep: one line per reason, not a row each.
    unclaimed: dict[str, list[str]] = {}
    for r in report.results:
        if r.outcome == "not claimed":
            unclaimed.setdefault(r.diagnosis, []).append(r.clause)
    for reason, names in unclaimed.items():
        lines += textwrap.wrap(f"not claimed ({len(names)}): {', '.join(names)}: {reason}", max(40, width - 2),
                               initial_indent="  ", subsequent_indent="        ")
    if report.not_run:
        lines.append(f"  not run ({len(report.not_run)}): {', '.join(report.not_run)}")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _replay(report: Report, result: ClauseResult) -> str:
    return result.replay or " ".join(["storetest check", report.target, *report.replay(result.clause)])


def render_markdown(reports: Sequence[Report]) -> str:
    lines = ["# storetest conformance report", ""]
    for report in reports:
        versions = ", ".join(f"{k} {v}" for k, v in report.versions.items())
        lines += [
            f"## {report.name}", "",
            f"- target: `{report.target}`" + (f", replica: `{report.replica}`" if report.replica else ""),
            f"- started: {report.started}; {versions}",
            f"- profile `{report.profile}`, seed `{report.seed}`, nonce `{report.nonce}`",
            f"- claims: {', '.join(report.capabilities) or 'none found'}"
            + "".join(f"; {c} only in part (has {', '.join(ms)})" for c, ms in report.partial.items()),
            f"- **{report.summary()}**", "",
        ]
        if report.stopped:
            lines += [f"Stopped: {report.stopped}", ""]
        lines += ["| clause | promise | result | seconds | diagnosis |", "|---|---|---|---|---|"]
        for r in report.results:
            link = f"[`{r.clause}`]({clause_link(r.clause)})"
            lines.append(f"| {link} | {_cell(r.promise)} | {SHOWN[r.outcome]} | {r.seconds:.2f} "
                         f"| {_cell(r.diagnosis)} |")
        if report.not_run:
            lines += ["", f"Not run ({len(report.not_run)}): {', '.join(f'`{n}`' for n in report.not_run)}."]
        for r in report.failures():
            lines += ["", f"### {r.clause}: {r.outcome}", "", r.diagnosis, ""]
            if r.violations:
                v = r.violations[0]
                lines += ["First violation:", "", "```", *v.lines(), "```", ""]
                if len(r.violations) > 1:
                    lines += [f"and {len(r.violations) - 1} more (in the JSON report).", ""]
            elif r.details:
                lines += ["```", r.details, "```", ""]
            lines += ["Replay:", "", "```sh", _replay(report, r), "```"]
        lines.append("")
    return "\n".join(lines)


def _as_json(report: Report) -> dict[str, Any]:
    outcomes: tuple[Any, ...] = tuple(SHOWN)
    return {
        "name": report.name,
        "target": report.target,
        "replica": report.replica,
        "started": report.started,
        "versions": dict(report.versions),
        "profile": report.profile,
        "seed": report.seed,
        "nonce": report.nonce,
        "capabilities": list(report.capabilities),
        "partial": dict(report.partial),
        "totals": {o: report.count(o) for o in outcomes} | {"not run": len(report.not_run),
                                                              "clauses": len(report.results)},
        "summary": report.summary(),
        "stopped": report.stopped,
        "clauses": [asdict(r) | {"replay": _replay(report, r) if r.outcome in ("failed", "error") else ""}
                    for r in report.results],
        "not_run": list(report.not_run),
    }


def render_json(reports: Sequence[Report]) -> str:
    return json.dumps({"format": JSON_FORMAT, "runs": [_as_json(r) for r in reports]}, indent=2,
                      ensure_ascii=False)


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:72em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}
.passed{color:#176117}.failed,.error{color:#a00;font-weight:bold}.skipped,.not-claimed{color:#777}
pre{background:#f6f6f6;padding:.5em;overflow-x:auto}
"""


def render_html(reports: Sequence[Report]) -> str:
    """One self-contained HTML file (no scripts, no external assets), for CI artifacts."""
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>storetest conformance report</title>",
           f"<style>{_STYLE}</style></head><body><h1>storetest conformance report</h1>"]
    for report in reports:
        versions = ", ".join(f"{k} {v}" for k, v in report.versions.items())
        out += [f"<h2>{e(report.name)}</h2><ul>",
                f"<li>target: <code>{e(report.target)}</code>"
                + (f", replica: <code>{e(report.replica)}</code>" if report.replica else "") + "</li>",
                f"<li>started: {e(report.started)}; {e(versions)}</li>",
                f"<li>profile <code>{e(report.profile)}</code>, seed <code>{report.seed}</code>, "
                f"nonce <code>{e(report.nonce)}</code></li>",
                f"<li>claims: {e(', '.join(report.capabilities) or 'none found')}</li>",
                f"<li><b>{e(report.summary())}</b></li></ul>"]
        if report.stopped:
            out.append(f"<p>Stopped: {e(report.stopped)}</p>")
        out.append("<table><tr><th>clause</th><th>promise</th><th>result</th><th>seconds</th>"
                   "<th>diagnosis</th></tr>")
        for r in report.results:
            anchor = clause_link(r.clause)
            css = r.outcome.replace(" ", "-")
            out.append(f"<tr><td><a href='{e(anchor)}'><code>{e(r.clause)}</code></a></td><td>{e(r.promise)}</td>"
                       f"<td class='{e(css)}'>{e(SHOWN[r.outcome])}</td><td>{r.seconds:.2f}</td>"
                       f"<td>{e(r.diagnosis)}</td></tr>")
        out.append("</table>")
        if report.not_run:
            out.append(f"<p>Not run ({len(report.not_run)}): {e(', '.join(report.not_run))}</p>")
        for r in report.failures():
            out.append(f"<h3>{e(r.clause)}: {e(r.outcome)}</h3><p>{e(r.diagnosis)}</p>")
            if r.violations:
                out.append("<pre>" + e("\n\n".join("\n".join(v.lines()) for v in r.violations)) + "</pre>")
            elif r.details:
                out.append(f"<pre>{e(r.details)}</pre>")
            out.append(f"<p>Replay:</p><pre>{e(_replay(report, r))}</pre>")
    out.append("</body></html>")
    return "\n".join(out)


def render(reports: Sequence[Report], path: str) -> str:
    """The report in the format the file name asks for: ``.json``, ``.html``, else Markdown."""
    if path.endswith(".json"):
        return render_json(reports)
    if path.endswith((".html", ".htm")):
        return render_html(reports)
    return render_markdown(reports)
