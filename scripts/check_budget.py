"""Measure the default ``storetest check`` (the SQLite reference store, the default
profile) before and after a change, beside the broken-store kill table of both, in one run.

    python scripts/check_budget.py                          # before 18f3f67, after HEAD
    python scripts/check_budget.py --before main~3 --after main --seeds 20 --output budget.md

For each side a fresh ``git worktree add --detach`` of its ref is made in a temp dir
(removed at the end, also on an error or Ctrl-C). Then, interleaved so both sides see the
machine alike (before run 1, after run 1, before run 2, after run 2, and so on to
``--runs``), the default check
runs as a user runs it: ``python -m storetest.cli check`` with PYTHONPATH=<worktree>, in
an empty temp working directory, with an empty ``XDG_CACHE_HOME`` of the side's own and
no ``STORETEST_*`` variables. Run 1 is a first run (no .pyc in the fresh worktree, no
Hypothesis database), run 2 and later ones second runs (both warm; with more than two, the
report adds their median). Each run's wall time (perf_counter
around the child), peak RSS (the child's own rusage from ``os.wait4``; ru_maxrss is KiB on
Linux), exit code and the check's summary line are recorded.

Then, per side, the kill table: this tree's ``scripts/broken_stores_table.py`` with
``--tree <worktree> --seeds N --seed-base 31000 --json``, with
STORETEST_REQUIRE=postgres,mysql,redis so a database that cannot start fails rather
than skips: every broken store against its intended clause on the same N seeds.

The report (Markdown) goes to stdout, and with ``--output FILE`` to FILE too: the
timings, the after/before ratios per run, the kill table per store and its totals, the
two commits, the date, the load averages, Python and the CPU. Progress goes to stderr.
Exit 1 when the after side misses a store on any seed or any check run exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "scripts" / "broken_stores_table.py"
BEFORE = "18f3f67"  # main when the speed work of issue 31 began
SEED_BASE = 31000  # the kill table's first seed, the same for both sides
SIDES = ("before", "after")


@dataclass(frozen=True)
class Run:
    """One child process, measured."""

    wall: float  #: seconds, perf_counter around the child
    peak_mb: float  #: the child's peak RSS, MiB (ru_maxrss / 1024)
    exit: int
    output: str  #: stdout and stderr, interleaved


def measure(command: list[str], *, cwd: Path, env: dict[str, str]) -> Run:
    """Run ``command`` to its end; its wall time and its own peak RSS (``os.wait4`` gives
    the child's rusage alone, not the sum over this process's children). The peak has a
    floor: this process's RSS when it forks (a few tens of MiB for this script)."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        # preexec_fn makes it fork, not vfork: Linux carries the forking memory's high-water
        # mark across exec into the child's ru_maxrss, under vfork this process's peak.
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                 preexec_fn=os.setsid)  # a session of its own; no threads here
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            _stop(child)
            raise
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        output = out.read().decode("utf-8", "replace")
    return Run(wall, usage.ru_maxrss / 1024, child.returncode, output)


def _stop(child: subprocess.Popen[Any]) -> None:
    """Interrupt a child as Ctrl-C would, once, so its teardown stops any server it started
    (each child has a session of its own: a Ctrl-C here reaches it only through this)."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=120)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def summary_line(output: str) -> str:
    """The check's own summary (``name: N passed ... (claims: ...)``), or its last line."""
    lines = [line for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if " (claims: " in line:
            return line.strip()
    return lines[-1].strip() if lines else "(no output)"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


@contextmanager
def worktrees(refs: dict[str, str], parent: Path) -> Iterator[dict[str, Path]]:
    """A fresh detached worktree per side under ``parent``; removed afterwards, whatever happened."""
    made: dict[str, Path] = {}
    try:
        for side, commit in refs.items():
            path = parent / side
            _git("worktree", "add", "--detach", str(path), commit)
            made[side] = path
        yield made
    finally:
        for path in made.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, capture_output=True)
        _git("worktree", "prune")


def _check_env(tree: Path, cache: Path) -> dict[str, str]:
    """A user's environment with nothing of storetest's set, the tree on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STORETEST_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # run 2 must find run 1's .pyc
    # A tree of the src layout has its packages under src/; an older tree, at its root.
    packages = tree / "src" if (tree / "src" / "storetest").is_dir() else tree
    env.update(PYTHONPATH=str(packages), XDG_CACHE_HOME=str(cache))
    return env


def _imports_from(tree: Path, cwd: Path, env: dict[str, str]) -> None:
    """Fail unless the child's ``storetest`` is the tree's; finds it without importing it
    and with -B, so no .pyc is written before run 1."""
    probe = "import importlib.util; print(importlib.util.find_spec('storetest').origin)"
    origin = subprocess.run([sys.executable, "-B", "-c", probe], cwd=cwd, env=env,
                            capture_output=True, text=True, check=True).stdout.strip()
    if not Path(origin).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the check would import storetest from {origin}, not from {tree}")


def _progress(text: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {text}", file=sys.stderr, flush=True)


def time_checks(trees: dict[str, Path], scratch: Path, count: int = 2) -> dict[str, list[Run]]:
    """``count`` default checks per side, interleaved: before 1, after 1, before 2, ..."""
    places: dict[str, tuple[Path, dict[str, str]]] = {}
    for side, tree in trees.items():
        cwd, cache = scratch / f"{side}-cwd", scratch / f"{side}-cache"
        cwd.mkdir()
        cache.mkdir()
        env = _check_env(tree, cache)
        _imports_from(tree, cwd, env)
        places[side] = (cwd, env)
    runs: dict[str, list[Run]] = {side: [] for side in trees}
    for number in range(1, count + 1):
        for side in trees:
            _progress(f"timing: {side} run {number}: storetest check")
            cwd, env = places[side]
            run = measure([sys.executable, "-m", "storetest.cli", "check"], cwd=cwd, env=env)
            runs[side].append(run)
            _progress(f"  {run.wall:.2f}s, {run.peak_mb:.0f} MiB, exit {run.exit}: {summary_line(run.output)}")
    return runs


def kill_table(tree: Path, seeds: int, out: Path, cache: Path) -> dict[str, Any] | None:
    """This tree's broken_stores_table.py on the side's tree; its JSON, or None if it wrote none."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(STORETEST_REQUIRE="postgres,mysql,redis", XDG_CACHE_HOME=str(cache))
    command = [sys.executable, str(TABLE), "--tree", str(tree), "--seeds", str(seeds),
               "--seed-base", str(SEED_BASE), "--json", str(out)]
    child = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    assert child.stdout is not None
    try:
        for line in child.stdout:  # a line per store, as it finishes
            _progress(f"  {line.rstrip()}")
        child.wait()
    except BaseException:
        _stop(child)
        raise
    finally:
        child.stdout.close()
    if not out.exists():
        _progress(f"  the kill table wrote no JSON (exit {child.returncode})")
        return None
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


def _load() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or 'unknown'} ({os.cpu_count()} CPUs)"


def render(facts: dict[str, str], runs: dict[str, list[Run]], kills: dict[str, dict[str, Any] | None],
           seeds: int) -> str:
    lines = ["# storetest check budget (issue 31)", ""]
    lines += [f"- {name}: {value}" for name, value in facts.items()]
    lines += ["", "## The default check (`storetest check`: SQLite reference store, default profile)", "",
              "| side | run | wall s | peak MiB | exit | summary |", "|---|---|---|---|---|---|"]
    for side in SIDES:
        for number, run in enumerate(runs[side], 1):
            state = "first" if number == 1 else "second"
            lines.append(f"| {side} | {number} ({state}) | {run.wall:.2f} | {run.peak_mb:.0f} | {run.exit} "
                         f"| {summary_line(run.output).replace('|', '/')} |")
    lines += ["", "| after / before | wall | peak RSS |", "|---|---|---|"]
    for number, (old, new) in enumerate(zip(runs["before"], runs["after"], strict=True), 1):
        lines.append(f"| run {number} | {new.wall / old.wall:.2f} | {new.peak_mb / old.peak_mb:.2f} |")
    if len(runs["before"]) > 2:
        warm = {side: runs[side][1:] for side in SIDES}
        wall = {side: statistics.median(r.wall for r in warm[side]) for side in SIDES}
        peak = {side: statistics.median(r.peak_mb for r in warm[side]) for side in SIDES}
        lines.append(f"| median of runs 2-{len(runs['before'])} | {wall['after'] / wall['before']:.2f} "
                     f"| {peak['after'] / peak['before']:.2f} |")
        lines += ["", "Median of the second runs: " + ", ".join(
            f"{side} {wall[side]:.2f} s, {peak[side]:.0f} MiB" for side in SIDES) + "."]
    if not seeds:
        return "\n".join([*lines, "", "No kill table (--seeds 0)."]) + "\n"
    lines += ["", f"## Kill table (every broken store against its intended clause, seeds "
              f"{SEED_BASE}..{SEED_BASE + seeds - 1})", ""]
    rows = {side: {r["name"]: r for r in (data or {}).get("rows", [])} for side, data in kills.items()}
    for side, data in kills.items():
        if data is None:
            lines.append(f"- {side}: NO RESULT (the kill table wrote no JSON; see stderr)")
    totals = ", ".join(
        f"{side} {sum(not r['missed'] for r in rows[side].values())}/{len(rows[side])}" for side in SIDES)
    lines += [f"caught on all {seeds} seeds: {totals}", "",
              "| broken store | intended clause | before | after |", "|---|---|---|---|"]
    names = list(dict.fromkeys([*rows["before"], *rows["after"]]))
    for name in names:
        cells = [f"{len(rows[s][name]['caught_seeds'])}/{seeds}" if name in rows[s] else "-" for s in SIDES]
        intended = (rows["after"].get(name) or rows["before"][name])["intended"]
        lines.append(f"| `{name}` | `{intended}` | {cells[0]} | {cells[1]} |")
    misses = [(side, row) for side in SIDES for row in rows[side].values() if row["missed"]]
    if misses:
        lines += ["", "Seeds missed (the clause and diagnosis seen):", ""]
        for side, row in misses:
            for miss in row["missed"]:
                lines.append(f"- {side} `{row['name']}` seed {miss['seed']}: "
                             f"`{miss['clause'] or '-'}`: {miss['diagnosis']}")
    return "\n".join(lines) + "\n"


def _failed(runs: dict[str, list[Run]], kills: dict[str, dict[str, Any] | None]) -> list[str]:
    """Why the budget run fails: a check that exited non-zero, a store the after side missed."""
    why = [f"{side} run {n} exited {run.exit}" for side in SIDES for n, run in enumerate(runs[side], 1)
           if run.exit != 0]
    after = kills.get("after", {"rows": []})
    if after is None:
        why.append("the after side's kill table gave no result")
    else:
        why += [f"after missed {r['name']} on {len(r['missed'])} seed(s)" for r in after["rows"] if r["missed"]]
    return why


def _stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the worktrees are removed."""
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=BEFORE, metavar="REF", help=f"the ref before (default {BEFORE})")
    parser.add_argument("--after", default="HEAD", metavar="REF", help="the ref after (default HEAD)")
    parser.add_argument("--seeds", type=int, default=20,
                        help="kill-table seeds per store (default 20; 0: timings only)")
    parser.add_argument("--output", type=Path, metavar="FILE", help="also write the report to FILE")
    parser.add_argument("--runs", type=int, default=2, metavar="N",
                        help="checks per side (default 2): the first run, then N-1 second runs, whose "
                             "median the report adds when N > 2")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be 2 or more: a first run and at least one second run")
    _stop_on_sigterm()
    started = time.perf_counter()
    refs = {side: _git("rev-parse", "--verify", f"{ref}^{{commit}}") for side, ref in
            (("before", args.before), ("after", args.after))}
    facts = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "before": f"`{args.before}` = {refs['before']}",
        "after": f"`{args.after}` = {refs['after']}",
        "Python": f"{platform.python_version()} ({sys.executable})",
        "CPU": _cpu(),
        "load average at start (1, 5, 15 min)": _load(),
    }
    with tempfile.TemporaryDirectory(prefix="check-budget-") as scratch_name:
        scratch = Path(scratch_name)
        with worktrees(refs, scratch / "trees") as trees:
            runs = time_checks(trees, scratch, args.runs)
            facts["load average after the timings"] = _load()
            kills: dict[str, dict[str, Any] | None] = {}
            for side, tree in trees.items() if args.seeds else ():  # --seeds 0: timings only
                _progress(f"kill table: {side}, {args.seeds} seeds from {SEED_BASE}")
                kills[side] = kill_table(tree, args.seeds, scratch / f"{side}-kills.json",
                                         scratch / f"{side}-kill-cache")
    facts["load average at end"] = _load()
    facts["the script's wall time"] = f"{time.perf_counter() - started:.0f} s"
    report = render(facts, runs, kills, args.seeds)
    sys.stdout.write(report)
    if args.output is not None:
        args.output.write_text(report, encoding="utf-8")
    why = _failed(runs, kills)
    for reason in why:
        print(f"check_budget: {reason}", file=sys.stderr)
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
