"""Where the default check's wall time goes: ``storetest check`` (the SQLite reference
store, the default profile, its clauses shared between two processes where it may) run
as a user runs it, each clause's start and end in each process, on one clock.

    python benchmarks/check_timeline.py              # 3 runs
    python benchmarks/check_timeline.py --runs 5 --clauses

Each run is a fresh ``python`` in a directory and an ``XDG_CACHE_HOME`` of the script's
own, both empty before a first run, untimed, warmed them (the runs are second runs, as
``benchmarks/vs_langgraph.py`` takes its medians of), with
``storetest.runner._run`` wrapped to note each clause's process, start and end. Printed
per run, in milliseconds from the interpreter's start (``time.perf_counter`` at the
wrapper's first line, which the interpreter's own start precedes by some 20-40 ms): when
storetest and Hypothesis were imported, when the shared clauses began and ended in
each process, when the races (run alone, once the worker has ended) began and ended,
when ``main()`` returned, and the wall time around the process; with ``--clauses``,
every clause; with ``--exit``, the same runs again with the interpreter torn down at
the exit, alternated with the command's own exit (``storetest.cli.run``: exit handlers
run, no teardown). Then the medians over the runs. The load average is printed with them:
times on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import load_average

ROOT = Path(__file__).resolve().parent.parent

WRAPPER = """
import time
T0 = time.perf_counter()
import os, sys
LOG = sys.argv[1]

def note(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

from storetest import cli, runner
note(f"{os.getpid()} imported {(time.perf_counter() - T0) * 1000:.1f}")
run = runner._run

def noted(c, *args, **kwargs):
    began = time.perf_counter()
    try:
        return run(c, *args, **kwargs)
    finally:
        alone = int(c.races or c.processes or c.reopen)
        note(f"{os.getpid()} clause {(began - T0) * 1000:.1f} {(time.perf_counter() - T0) * 1000:.1f} {alone} {c.name}")

runner._run = noted
main = cli.main

def returning(argv=None):
    code = main(argv)
    note(f"{os.getpid()} returned {(time.perf_counter() - T0) * 1000:.1f}")
    return code

cli.main = returning
sys.argv = ["storetest", "check", "-q"]
if os.environ.get("TIMELINE_EXIT") == "normal":
    sys.exit(cli.main())  # the interpreter torn down, as at any exit
cli.run()  # as the storetest command ends
"""


def one_run(
    directory: Path, env: dict[str, str], log: Path, way: str = "command"
) -> tuple[dict[str, float], list[str]]:
    log.unlink(missing_ok=True)
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", WRAPPER, str(log)], cwd=directory, env={**env, "TIMELINE_EXIT": way},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = (time.perf_counter() - began) * 1000
    if done.returncode:
        raise SystemExit(f"storetest check exited {done.returncode}: {done.stderr[-2000:]}")
    parent = None
    clauses: list[tuple[int, float, float, bool, str]] = []
    phases: dict[str, float] = {"wall": wall}
    for line in log.read_text().splitlines():
        pid, kind, *rest = line.split()
        if kind == "imported":
            parent = int(pid)
            phases["imported"] = float(rest[0])
        elif kind == "returned":
            phases["main() returned"] = float(rest[0])
        else:
            clauses.append((int(pid), float(rest[0]), float(rest[1]), rest[2] == "1", rest[3]))
    shared = [c for c in clauses if not c[3]]
    racing = [c for c in clauses if c[3]]
    for who, pids in (("first process", {parent}), ("worker", {c[0] for c in shared} - {parent})):
        mine = [c for c in shared if c[0] in pids]
        if mine:
            phases[f"shared began, {who}"] = min(c[1] for c in mine)
            phases[f"shared ended, {who}"] = max(c[2] for c in mine)
    if racing:
        phases["races began"] = min(c[1] for c in racing)
        phases["races ended"] = max(c[2] for c in racing)
    lines = [f"    {'worker ' if pid != parent else 'first  '} {a:7.1f} {b:7.1f} {b - a:6.1f}  {name}"
             for pid, a, b, _, name in sorted(clauses, key=lambda c: c[1])]
    return phases, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clauses", action="store_true", help="print every clause of every run")
    parser.add_argument("--exit", action="store_true",
                        help="also time runs that exit normally (the interpreter torn down), alternated "
                             "with the command's exit (storetest.cli.run), and print both")
    args = parser.parse_args()
    print(f"== the default check's timeline ({args.runs} runs after a first; {load_average()})")
    table: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="check-timeline-") as scratch:
        directory, cache, log = Path(scratch, "work"), Path(scratch, "cache"), Path(scratch, "clauses.log")
        directory.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("STORETEST_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(PYTHONPATH=str(ROOT / "src"), XDG_CACHE_HOME=str(cache))
        one_run(directory, env, log)  # the first run: .pyc and Hypothesis's caches made
        exits = ("command", "normal") if args.exit else ("command",)
        for n in range(1, args.runs + 1):
            for way in exits if n % 2 else exits[::-1]:
                phases, lines = one_run(directory, env, log, way)
                print(f"  run {n}{f' ({way} exit)' if args.exit else ''}: "
                      + ", ".join(f"{k} {v:.0f}" for k, v in phases.items()))
                if args.clauses:
                    print("\n".join(lines))
                for key, value in phases.items():
                    table.setdefault(f"{key} ({way} exit)" if args.exit else key, []).append(value)
    print("  medians (ms): " + ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in table.items()))
    if args.exit:
        after = {way: [w - r for w, r in zip(table[f"wall ({way} exit)"], table[f"main() returned ({way} exit)"],
                                             strict=True)] for way in exits}
        print("  wall time after main() returned, medians (ms, with the interpreter's start): "
              + ", ".join(f"{way} exit {statistics.median(v):.0f}" for way, v in after.items()))
    print(f"  load after: {load_average()}")


if __name__ == "__main__":
    main()
