"""LangGraph's own conformance suite and storetest, head to head, on every broken saver
of this project and on LangGraph's reference savers.

    python scripts/langgraph_head_to_head.py                 # print the table, write it into docs/ecosystem.md
    python scripts/langgraph_head_to_head.py --only cp-filter-ignored --output /tmp/h2h.md
    python scripts/langgraph_head_to_head.py --seed 7 --no-write

For each saver, two runs, one after the other in this process:

- LangGraph's suite: ``langgraph-checkpoint-conformance``'s ``validate()`` with every
  capability it detects on the saver, a fresh saver per capability (a new directory,
  the same throwaway Postgres database), its ``setup()`` called first where it has one,
  as the saver's users must;
- storetest: ``storetest.check()`` through the binding (``checkpointers(...)``), every
  clause, the ``fast`` profile, a fixed seed (7 unless ``--seed``).

The broken savers are ``tests.broken_stores.checkpoint_variants``'s (backend
``checkpoint``): each carries one bug, and the clause meant to catch it. The other savers
are ``tests.ecosystem.langgraph``'s contenders: LangGraph's own (``InMemorySaver``,
``AsyncSqliteSaver``, ``AsyncPostgresSaver`` on a throwaway Postgres) and the
third-party ones judged there (``--no-third-party`` leaves those out). LangGraph's suite
drives only the async API (``aput``, ``aget_tuple``...), one saver at a time; a row says
so where the bug lies outside that reach, and names the base capabilities a saver does
not implement (the suite skips their tests).

The table goes into ``docs/ecosystem.md`` between ``<!-- head-to-head:langgraph -->``
markers inside the LangGraph section (``scripts/ecosystem_table.py --sdk langgraph``
keeps the block). Exit status 1 when a broken saver is not caught by the clause meant
for it, or a judged saver fails a clause no repro is listed for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "ecosystem.md"
START, END = "<!-- head-to-head:langgraph -->", "<!-- /head-to-head:langgraph -->"
SDK_END = "<!-- /sdk:langgraph -->"

#: Broken savers whose bug needs two savers on one backend: the suite opens one at a time.
OUT_OF_REACH = {
    "cp-cached-latest": "needs two savers on one database (one caches, the other writes); the suite opens one "
                        "saver at a time",
    "cp-setup-check-then-create": "needs savers starting together on a fresh database; the suite starts one at "
                                  "a time",
    "cp-put-writes-not-atomic": "needs put_writes calls in flight together; the suite awaits one call at a time",
}
#: The reference savers: LangGraph's own distributions among tests.ecosystem.langgraph's contenders.
REFERENCE_PROJECTS = ("langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres")


@dataclass
class Subject:
    """One saver both suites judge."""

    name: str
    kind: str  # "broken", "reference" (LangGraph's own) or "third-party"
    binding: Any  # what storetest.check takes: checkpointers(outer factory)
    replica: Any = None
    bug: str = ""
    clause: str = ""  # the clause meant to catch a broken saver
    skip: dict[str, str] = field(default_factory=dict)
    reopen: Any = None  # opens the same data in another process: the crash clause runs
    repros: dict[str, str] = field(default_factory=dict)  # clause -> repro, for a saver judged in docs/ecosystem.md

    @property
    def outer(self) -> Callable[..., Any]:
        """The outer factory (fixtures in, a saver out) under the binding."""
        return self.binding.factory  # type: ignore[no-any-return]


@dataclass
class Theirs:
    """LangGraph's suite on one saver."""

    passed: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)  # "capability: test_name"
    capabilities: list[str] = field(default_factory=list)  # the ones it detected and ran
    missing: list[str] = field(default_factory=list)  # base capabilities not implemented (their tests skipped)
    error: str = ""
    seconds: float = 0.0


@dataclass
class Ours:
    """storetest on one saver."""

    failed: list[str] = field(default_factory=list)  # clause names
    errors: list[str] = field(default_factory=list)
    diagnoses: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def subjects(include_references: bool = True, third_party: bool = True) -> list[Subject]:
    """Every broken saver (backend ``checkpoint``), then LangGraph's own savers, then the
    third-party ones."""
    sys.path.insert(0, str(ROOT))
    from tests.broken_stores import registry
    from tests.ecosystem import langgraph

    # A broken saver built on InMemorySaver keeps its data in one process: the process
    # clause does not apply. One on a file (its clause the process or a crash clause, a
    # reopen given) runs every clause.
    process = next(iter(langgraph.IN_ONE_PROCESS))
    found = [Subject(b.name, "broken", b.factory, b.replica, b.bug, b.clause, reopen=b.reopen,
                     skip={} if b.reopen or b.clause == process else dict(langgraph.IN_ONE_PROCESS))
             for b in registry() if b.backend == "checkpoint"]

    def judged(c: Any, kind: str) -> Subject:
        binding = c.binding()
        return Subject(c.name, kind, binding, skip=dict(c.skip), reopen=binding if c.reopen else None,
                       repros=_repros(c.name))

    if include_references:
        found += [judged(c, "reference") for c in langgraph.CONTENDERS
                  if c.binding is not None and c.project in REFERENCE_PROJECTS]
    if third_party:
        found += [judged(c, "third-party") for c in langgraph.CONTENDERS
                  if c.binding is not None and c.project not in REFERENCE_PROJECTS]
    return found


def _repros(contender: str) -> dict[str, str]:
    from tests.ecosystem import langgraph

    return {d.clause: d.repro for d in langgraph.DEFECTS if d.contender == contender}


def unlisted(subject: Subject, ours: Ours) -> list[str]:
    """The clauses that failed a judged saver with no repro listed for them (none for a
    broken saver): a false alarm of ours, or a flake, until reviewed."""
    return [] if subject.kind == "broken" else [c for c in ours.failed if c not in subject.repros]


@contextlib.contextmanager
def _fixtures() -> Iterator[Callable[[str], Any]]:
    sys.path.insert(0, str(ROOT))
    from tests.broken_stores import fixtures_outside_pytest

    with fixtures_outside_pytest() as fixture:
        yield fixture


async def _saver(outer: Callable[..., Any], fixture: Callable[[str], Any]) -> AsyncIterator[Any]:
    """A saver from the outer factory, entered and set up as its users do it; torn down after."""
    names = [p.name for p in inspect.signature(outer).parameters.values() if p.default is p.empty]
    made = outer(**{n: fixture(n) for n in names})
    generator = made if inspect.isasyncgen(made) or inspect.isgenerator(made) else None
    if inspect.isasyncgen(made):
        made = await made.__anext__()
    elif inspect.isgenerator(made):
        made = next(made)
    elif inspect.isawaitable(made):
        made = await made
    manager = None
    if not callable(getattr(made, "get_tuple", None)) and hasattr(made, "__aenter__"):
        manager, made = made, await made.__aenter__()
    elif not callable(getattr(made, "get_tuple", None)) and hasattr(made, "__enter__"):
        manager, made = made, made.__enter__()
    try:
        setup = getattr(made, "setup", None)
        if callable(setup):
            done = setup()
            if inspect.isawaitable(done):
                await done
        yield made
    finally:
        if manager is not None:
            if hasattr(manager, "__aexit__"):
                await manager.__aexit__(None, None, None)
            else:
                manager.__exit__(None, None, None)
        if inspect.isasyncgen(generator):
            with contextlib.suppress(StopAsyncIteration):
                await generator.__anext__()
        elif inspect.isgenerator(generator):
            with contextlib.suppress(StopIteration):
                next(generator)


def run_theirs(subject: Subject, fixture: Callable[[str], Any]) -> Theirs:
    """``validate()`` of langgraph-checkpoint-conformance, every capability it detects."""
    from langgraph.checkpoint.conformance import checkpointer_test, validate

    @checkpointer_test(name=subject.name)
    async def factory() -> AsyncIterator[Any]:
        async for saver in _saver(subject.outer, fixture):
            yield saver

    out = Theirs()
    started = time.perf_counter()
    try:
        report = asyncio.run(validate(factory))
    except Exception as exc:  # the suite itself could not run the saver
        out.error = f"{type(exc).__name__}: {exc}"
    else:
        from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES

        base = {c.value for c in BASE_CAPABILITIES}
        for capability, result in report.results.items():
            if not result.detected and capability in base:
                out.missing.append(capability)
            if not result.detected or result.passed is None:
                continue
            out.capabilities.append(capability)
            out.passed += result.tests_passed
            out.failed += result.tests_failed
            out.failures += [f"{capability}: {f.split(':', 1)[0]}" for f in result.failures]
    out.seconds = time.perf_counter() - started
    return out


def run_ours(subject: Subject, seed: int, clauses: Sequence[str] | None = None) -> Ours:
    """``storetest.check()`` through the binding: every clause (or ``clauses``), the fast profile."""
    from storetest import check

    out = Ours()
    started = time.perf_counter()
    report = check(subject.binding, subject.replica, seed=seed, profile="fast", name=subject.name,
                   skip=subject.skip, clauses=list(clauses) if clauses else None, reopen=subject.reopen)
    out.seconds = time.perf_counter() - started
    for result in report.results:
        if result.outcome == "failed":
            out.failed.append(result.clause)
            out.diagnoses[result.clause] = result.diagnosis
        elif result.outcome == "error":
            out.errors.append(f"{result.clause}: {result.diagnosis}")
    return out


def verdict(subject: Subject, theirs: Theirs, ours: Ours) -> str:
    """For a broken saver: who caught it (``both``, ``storetest only``, ``LangGraph only``,
    ``neither``); for a reference saver: who failed it."""
    caught_theirs, caught_ours = bool(theirs.failed or theirs.error), bool(ours.failed)
    if subject.kind != "broken":
        return {(True, True): "both fail it", (False, True): "storetest only fails it",
                (True, False): "LangGraph only fails it", (False, False): "both pass it"}[caught_theirs, caught_ours]
    return {(True, True): "both", (False, True): "storetest only", (True, False): "LangGraph only",
            (False, False): "neither"}[caught_theirs, caught_ours]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def row(subject: Subject, theirs: Theirs, ours: Ours) -> str:
    """One Markdown row: saver | caught by LangGraph's suite | caught by storetest | who | seconds."""
    name = f"`{subject.name}`: {subject.bug}" if subject.kind == "broken" else f"**{subject.name}** ({subject.kind})"
    if theirs.error:
        lg = f"error: {theirs.error[:160]}"
    elif theirs.failed:
        shown = ", ".join(f"`{f}`" for f in theirs.failures[:4]) + (", ..." if len(theirs.failures) > 4 else "")
        lg = f"**{theirs.failed} of {theirs.passed + theirs.failed} failed**: {shown}"
    else:
        lg = f"missed ({theirs.passed} passed)" if subject.kind == "broken" else f"pass ({theirs.passed} passed)"
        if subject.name in OUT_OF_REACH:
            lg += f"; out of its reach: {OUT_OF_REACH[subject.name]}"
    if theirs.missing:
        lg += f"; not implemented, its tests skipped: {', '.join(theirs.missing)}"
    if ours.failed:
        st = ", ".join(f"**`{c}`**" if c == subject.clause else f"`{c}`"
                       + (" (no repro listed: review it)" if c in unlisted(subject, ours) else "") for c in ours.failed)
    else:
        st = "missed" if subject.kind == "broken" else "pass"
    if ours.errors:
        st += "; error: " + "; ".join(ours.errors)[:160]
    return (f"| {_cell(name)} | {_cell(lg)} | {_cell(st)} | {verdict(subject, theirs, ours)} | "
            f"{theirs.seconds:.1f} | {ours.seconds:.0f} |")


def table(results: Sequence[tuple[Subject, Theirs, Ours]], seed: int) -> str:
    """The Markdown block, between its markers."""
    broken = [(s, t, o) for s, t, o in results if s.kind == "broken"]
    missed = [s.name for s, t, o in broken if not (t.failed or t.error)]
    ours_missed = [s.name for s, t, o in broken if s.clause not in o.failed]
    from importlib.metadata import version

    lines = [START, "### Head to head with LangGraph's conformance suite", "",
             f"Generated by `python scripts/langgraph_head_to_head.py` (storetest: every clause, profile `fast`, "
             f"seed {seed}; LangGraph's suite: `langgraph-checkpoint-conformance` "
             f"{version('langgraph-checkpoint-conformance')} `validate()`, every capability it detects, a fresh "
             "saver per capability, `setup()` called first). Each broken saver is LangGraph's `InMemorySaver` with "
             "one bug ([broken stores](broken-stores.md)); the clause meant to catch it is in bold. Seconds are "
             "each suite's wall time in one process on a shared machine.", ""]
    if broken:
        lines += [f"Of {len(broken)} broken savers, storetest catches {len(broken) - len(ours_missed)} with the "
                  f"clause meant for each; LangGraph's suite catches {len(broken) - len(missed)} and misses "
                  f"{len(missed)}: " + ", ".join(f"`{n}`" for n in missed) + ".", ""]
    others = [(s, t, o) for s, t, o in results if s.kind == "third-party"]
    if others:
        theirs_failed = [s.name for s, t, o in others if t.failed or t.error]
        lines += [f"Of {len(others)} third-party savers, storetest fails "
                  f"{sum(bool(o.failed) for s, t, o in others)} (each failure with its repro in the notes above); "
                  f"LangGraph's suite fails {len(theirs_failed)}"
                  + (": " + ", ".join(f"**{n}**" for n in theirs_failed) if theirs_failed else "") + ".", ""]
    lines += ["| saver | LangGraph's suite | storetest (failed clauses) | caught by | LangGraph s | storetest s |",
              "|---|---|---|---|---|---|"]
    lines += [row(s, t, o) for s, t, o in results]
    lines += ["", END]
    return "\n".join(lines)


def place(block: str, text: str) -> str:
    """``text`` (docs/ecosystem.md) with the block replaced, or put at the end of the LangGraph section."""
    if START in text and END in text:
        return text[: text.index(START)] + block + text[text.index(END) + len(END):]
    if SDK_END not in text:
        raise ValueError(f"no LangGraph section ({SDK_END}) to put the table in")
    at = text.index(SDK_END)
    return text[:at] + block + "\n\n" + text[at:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7, help="storetest's seed (default 7)")
    parser.add_argument("--only", action="append", help="run only this saver (repeatable)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument("--no-third-party", action="store_true", help="leave out the third-party savers")
    args = parser.parse_args(argv)
    chosen = [s for s in subjects(third_party=not args.no_third_party) if not args.only or s.name in args.only]
    results = []
    failures = []
    with _fixtures() as fixture:
        for subject in chosen:
            theirs = run_theirs(subject, fixture)
            ours = run_ours(subject, args.seed)
            results.append((subject, theirs, ours))
            print(f"{subject.name}: LangGraph's suite {theirs.failed} failed ({theirs.seconds:.1f} s)"
                  f"{' ERROR ' + theirs.error if theirs.error else ''}; storetest failed "
                  f"{', '.join(ours.failed) or 'none'} ({ours.seconds:.0f} s)", flush=True)
            if subject.kind == "broken" and subject.clause not in ours.failed:
                failures.append(f"{subject.name}: {subject.clause} did not catch it")
            failures += [f"{subject.name}: {c} failed, with no repro listed: {ours.diagnoses[c]}"
                         for c in unlisted(subject, ours)]
    block = table(results, args.seed)
    print(block)
    if not args.no_write:
        args.output.write_text(place(block, args.output.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"wrote {args.output}")
    for line in failures:
        print(f"REVIEW: {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
