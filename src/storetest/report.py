"""The conformance report: a row per claimed clause with its verdict and one-line
diagnosis, rendered as Markdown, as JSON (its schema ships beside this module, in
``report.schema.json``), or as one self-contained HTML file; the terminal table is
:func:`storetest.results.render_text`. Pure functions over
:class:`~storetest.results.Report`; the plugin and the command feed them.

A report stands alone: it links only inside itself (each clause's promise and the real
bugs it exists for are in it), shows every violation of a failure and the story of the
failing example, and names the clauses the store does not claim in one line.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any, Final

from storetest.results import SETUP_ROW, SHOWN, ClauseResult, Report, render_text

__all__ = ["JSON_FORMAT", "SHOWN", "render", "render_html", "render_json", "render_markdown", "render_text",
           "schema", "unwritable"]

#: Bumped when a key of the JSON report changes meaning or goes away.
JSON_FORMAT: Final = 3

#: ``code`` as the docstrings write it: ``x`` (reST), or a role such as :func:`x`.
_CODE: Final = re.compile(r"``(.+?)``|:[a-z]+:`~?(.+?)`|`([^`]+)`")


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) every JSON report validates against."""
    text = resources.files("storetest").joinpath("report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def _spans(text: str) -> Iterator[tuple[bool, str]]:
    """``text`` cut into (is code, piece) pieces."""
    at = 0
    for m in _CODE.finditer(text):
        if m.start() > at:
            yield False, text[at:m.start()]
        yield True, next(g for g in m.groups() if g is not None)
        at = m.end()
    if at < len(text):
        yield False, text[at:]


def _anchor(clause: str) -> str:
    return f"clause-{clause}"


def _replay(report: Report, result: ClauseResult) -> str:
    return result.replay or " ".join(["storetest check", report.target, *report.replay(result.clause)])


def _versions(report: Report) -> str:
    return ", ".join(f"{k} {v}" for k, v in report.versions.items())


def _described(reports: Sequence[Report]) -> list[ClauseResult]:
    """One result per clause that some report shows a row for, in clause order."""
    seen: dict[str, ClauseResult] = {}
    for report in reports:
        for r in report.claimed():
            seen.setdefault(r.clause, r)
    return list(seen.values())


# -- Markdown ---------------------------------------------------------------------------

_MD_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|#])")


def _md(text: str) -> str:
    """Text for Markdown, its code as code and nothing else read as markup (a diagnosis
    quoting ``<b>`` or ``[x](y)`` stays text, and makes no link)."""
    out = []
    for code, piece in _spans(text.replace("\n", " ")):
        if code:
            out.append(f"`` {piece} ``" if "`" in piece else f"`{piece}`")
        else:
            out.append(_MD_SPECIAL.sub(r"\\\1", piece))
    return "".join(out)


def _fenced(lines: Sequence[str], info: str = "text") -> list[str]:
    fence = "```"
    while any(line.startswith(fence) for line in lines):
        fence += "`"
    return [fence + info, *lines, fence, ""]


def render_markdown(reports: Sequence[Report]) -> str:
    lines = ["# storetest conformance report", ""]
    for report in reports:
        lines += [
            f"## {_md(report.name)}", "",
            f"- target: `{report.target}`" + (f", replica: `{report.replica}`" if report.replica else ""),
            f"- started: {report.started}; {_versions(report)}",
            f"- profile `{report.profile}`, " + (f"seed `{report.seed}`, nonce `{report.nonce}`" if report.nonce
                                                 else "no seed used (no clause ran)"),
            f"- claims: {', '.join(report.capabilities) or 'none found'}"
            + "".join(f"; {c} only in part (has {', '.join(ms)})" for c, ms in report.partial.items()),
            f"- **{report.summary()}**", "",
        ]
        if report.stopped:
            lines += [f"Stopped: {_md(report.stopped)}", ""]
        if report.claimed():
            lines += ["| clause | result | seconds | diagnosis |", "|---|---|---|---|"]
        for r in report.claimed():
            shown = SETUP_ROW if r.setup else f"[`{r.clause}`](#{_anchor(r.clause)})"
            lines.append(f"| {shown} | {SHOWN[r.outcome]} | {r.seconds:.2f} "
                         f"| {_md(r.diagnosis)}{''.join(f' limit: {_md(x)}.' for x in r.limits)} |")
        lines.append("")
        if report.not_claimed_line():
            lines += [report.not_claimed_line() + ".", ""]
        for label, names in (("Not reached", report.not_reached), ("Deselected", report.deselected)):
            if names:
                lines += [f"{label} ({len(names)}): {', '.join(f'`{n}`' for n in names)}.", ""]
        for r in report.failures():
            lines += [f"### {SETUP_ROW if r.setup else r.clause}: {r.outcome}", "", _md(r.diagnosis), ""]
            if r.violations:
                lines += [f"Violations ({len(r.violations)}):", ""]
                lines += _fenced([line for v in r.violations for line in v.lines()])
                if r.story:
                    lines += ["How the failing example went (as Hypothesis shrank it):", ""]
                    lines += _fenced(r.story)
                if r.remarks:
                    lines += [*(f"- {_md(remark)}" for remark in r.remarks), ""]
            elif r.details:
                lines += _fenced(r.details.splitlines())
            lines += ["Replay:", "", *_fenced([_replay(report, r)], "sh")]
    described = _described(reports)
    if described:
        lines += ["## The clauses", ""]
        for r in described:
            lines += [f'<a id="{_anchor(r.clause)}"></a>', "", f"**`{r.clause}`** ({r.topic}): {_md(r.promise)}", ""]
            if r.exists_for:
                lines += [*(_md(paragraph) for paragraph in r.exists_for.split("\n")), ""]
    return "\n".join(lines)


# -- JSON -------------------------------------------------------------------------------

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
        "totals": {o: report.count(o) for o in outcomes} | {
            "not run": len(report.not_run), "clauses": len(report.results), "selected": report.selected(),
            "not reached": len(report.not_reached), "deselected": len(report.deselected)},
        "summary": report.summary(),
        "stopped": report.stopped,
        "interrupted": report.interrupted,
        "results": [asdict(r) | {"replay": _replay(report, r) if r.outcome in ("failed", "error") else ""}
                    for r in report.results],
        "not_claimed": report.not_claimed(),
        "not_run": list(report.not_run),
        "deselected": list(report.deselected),
    }


def render_json(reports: Sequence[Report]) -> str:
    return json.dumps({"format": JSON_FORMAT, "runs": [_as_json(r) for r in reports]}, indent=2,
                      ensure_ascii=False)


# -- HTML -------------------------------------------------------------------------------

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:72em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top}
.passed{color:#176117}.failed,.error{color:#a00;font-weight:bold}.skipped{color:#777}
pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap;overflow-wrap:anywhere}
code{background:#f6f6f6}
"""


def _html(text: str) -> str:
    """Escaped text, its code as ``<code>``."""
    return "".join(f"<code>{html.escape(piece)}</code>" if code else html.escape(piece)
                   for code, piece in _spans(text))


def _pre(lines: Sequence[str]) -> str:
    return "<pre>" + html.escape("\n".join(lines)) + "</pre>"


def render_html(reports: Sequence[Report]) -> str:
    """One self-contained HTML file (no scripts, no external assets), for CI artifacts."""
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>storetest conformance report</title>",
           f"<style>{_STYLE}</style></head><body><h1>storetest conformance report</h1>"]
    for report in reports:
        out += [f"<h2>{e(report.name)}</h2><ul>",
                f"<li>target: <code>{e(report.target)}</code>"
                + (f", replica: <code>{e(report.replica)}</code>" if report.replica else "") + "</li>",
                f"<li>started: {e(report.started)}; {e(_versions(report))}</li>",
                f"<li>profile <code>{e(report.profile)}</code>, "
                + (f"seed <code>{report.seed}</code>, nonce <code>{e(report.nonce)}</code>" if report.nonce
                   else "no seed used (no clause ran)") + "</li>",
                f"<li>claims: {e(', '.join(report.capabilities) or 'none found')}"
                + "".join(f"; {e(c)} only in part (has {e(', '.join(ms))})" for c, ms in report.partial.items())
                + "</li>",
                f"<li><b>{e(report.summary())}</b></li></ul>"]
        if report.stopped:
            out.append(f"<p>Stopped: {_html(report.stopped)}</p>")
        if report.claimed():
            out.append("<table><tr><th>clause</th><th>result</th><th>seconds</th><th>diagnosis</th></tr>")
        for r in report.claimed():
            shown = e(SETUP_ROW) if r.setup else f"<a href='#{e(_anchor(r.clause))}'><code>{e(r.clause)}</code></a>"
            out.append(f"<tr><td>{shown}</td>"
                       f"<td class='{e(r.outcome)}'>{e(SHOWN[r.outcome])}</td><td>{r.seconds:.2f}</td>"
                       f"<td>{_html(r.diagnosis)}{''.join(f' limit: {_html(x)}.' for x in r.limits)}</td></tr>")
        if report.claimed():
            out.append("</table>")
        if report.not_claimed_line():
            out.append(f"<p>{e(report.not_claimed_line())}.</p>")
        for label, names in (("Not reached", report.not_reached), ("Deselected", report.deselected)):
            if names:
                out.append(f"<p>{label} ({len(names)}): {e(', '.join(names))}</p>")
        for r in report.failures():
            out.append(f"<h3>{e(SETUP_ROW if r.setup else r.clause)}: {e(r.outcome)}</h3><p>{_html(r.diagnosis)}</p>")
            if r.violations:
                out.append(f"<p>Violations ({len(r.violations)}):</p>")
                out.append(_pre([line for v in r.violations for line in v.lines()]))
                if r.story:
                    out.append("<p>How the failing example went (as Hypothesis shrank it):</p>" + _pre(r.story))
                out += [f"<p>{_html(remark)}</p>" for remark in r.remarks]
            elif r.details:
                out.append(_pre(r.details.splitlines()))
            out.append(f"<p>Replay:</p>{_pre([_replay(report, r)])}")
    described = _described(reports)
    if described:
        out.append("<h2>The clauses</h2>")
        for r in described:
            out.append(f"<p id='{e(_anchor(r.clause))}'><b><code>{e(r.clause)}</code></b> ({e(r.topic)}): "
                       f"{_html(r.promise)}</p>")
            out += [f"<p>{_html(paragraph)}</p>" for paragraph in r.exists_for.split("\n") if paragraph]
    out.append("</body></html>")
    return "\n".join(out)


def unwritable(path: str) -> str:
    """Why a report cannot be written to ``path`` (checked before a run starts), or ""."""
    where = Path(path)
    if where.is_dir():
        return "is a directory; name a file (.md, .json or .html)"
    if not where.parent.is_dir():
        return f"the directory {str(where.parent)!r} does not exist"
    if not os.access(where.parent, os.W_OK) or (where.exists() and not os.access(where, os.W_OK)):
        return "cannot be written (permission denied)"
    return ""


def render(reports: Sequence[Report], path: str) -> str:
    """The report in the format the file name asks for: ``.json``, ``.html``, else Markdown."""
    if path.endswith(".json"):
        return render_json(reports)
    if path.endswith((".html", ".htm")):
        return render_html(reports)
    return render_markdown(reports)
