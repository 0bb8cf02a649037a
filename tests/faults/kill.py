"""SIGKILL of processes that save, add steers and take steers, on a real backend.

The parent has already imported every driver, so a child is a plain ``os.fork()``:
no interpreter start, no imports, only a connection to open. Three children run at
once (a saver, an adder, a taker) on the same two sessions; the parent waits until a
child has connected, lets it work for a random 0-20 ms (reading the transcript all
the while), kills it with SIGKILL, reads what a killed saver left before anything else
can save, and forks a replacement. Each child logs what it is about to do and what came back, one
``os.write`` per line to a file (which survives the kill), so the parent knows which
operations were in flight when their process died.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.faults.workload import SteerLedger, error_kind, error_problem, transcript, whole

TRANSCRIPT = "fault-transcript"
QUEUE = "fault-queue"
ROLES = ("save", "add", "take")

#: Opens a store in a child (or the parent's checker): returns the store, on the
#: running event loop for an async store.
Opener = Callable[[], Any]


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _log(fd: int, record: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(record) + "\n").encode())


async def _work(role: str, open_store: Opener, log: int, ready: int) -> None:
    store = await _call(open_store())
    os.write(ready, b"r")
    os.close(ready)
    me = f"p{os.getpid()}"
    n = 0
    while True:
        n += 1
        if role == "save":
            messages = transcript(me, n)
            if not messages:
                continue  # never empty here: an empty read would be a save half done
            _log(log, {"k": "S", "w": me, "g": n})
            op, session, call = "save", TRANSCRIPT, store.save(TRANSCRIPT, messages)
        elif role == "add":
            text = f"{me}:{n}"
            _log(log, {"k": "A", "t": text, "at": time.monotonic()})
            op, session, call = "add_steer", QUEUE, store.add_steer(QUEUE, text)
        else:
            _log(log, {"k": "T"})
            op, session, call = "take_steers", QUEUE, store.take_steers(QUEUE)
        try:
            result = await _call(call)
        except Exception as exc:
            _log(log, {"k": "E", "op": op, "kind": error_kind(exc),
                       "problem": error_problem(op, session, exc),
                       "unknown": type(exc).__name__ == "OutcomeUnknown"})
            continue
        if role == "save":
            _log(log, {"k": "s", "g": n})
        elif role == "add":
            _log(log, {"k": "a", "t": text})
        else:
            _log(log, {"k": "t", "s": result})
            if not result:
                await asyncio.sleep(0.001)  # an empty queue: let the adder catch up


def _spawn(role: str, open_store: Opener, log_path: Path) -> tuple[int, int]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_end)
            log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                asyncio.run(_work(role, open_store, log, write_end))
            except BaseException:
                _log(log, {"k": "crash", "tb": traceback.format_exc()})
                code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def run(open_store: Opener, checker: Any, kills: int, directory: Path, seed: int) -> dict[str, Any]:
    """Kill ``kills`` children at random moments; return the figures and problems.

    ``checker`` is a synchronous view of the backend for the parent (``messages``,
    ``take_steers``), never killed.
    """
    rng = random.Random(seed)
    logs: dict[int, tuple[str, Path]] = {}
    deaths: dict[int, float] = {}  # CLOCK_MONOTONIC is one clock for every process
    children: dict[str, tuple[int, int]] = {}
    problems: list[str] = []
    torn = reads = 0

    def spawn(role: str) -> None:
        path = directory / f"{role}-{len(logs)}.log"
        pid, ready = _spawn(role, open_store, path)
        logs[pid] = (role, path)
        children[role] = (pid, ready)

    def check_transcript() -> None:
        nonlocal torn, reads
        reads += 1
        got = checker.messages(TRANSCRIPT)
        # Empty is torn too: the parent saved first and no child saves an empty one.
        if not got or whole(got) is None:
            torn += 1
            problems.append(f"torn transcript after {reads} reads: {got[:3]}... ({len(got)} messages)")

    checker.save(TRANSCRIPT, transcript("parent", 1))
    for role in ROLES:
        spawn(role)
    for i in range(kills):
        role = ROLES[i % len(ROLES)]
        pid, ready = children[role]
        started = os.read(ready, 1)  # blocks until connected (b"" if it died first)
        os.close(ready)
        if started:
            # Read while it works: a reader must never see a save half done.
            deadline = time.monotonic() + rng.uniform(0, 0.02)
            while time.monotonic() < deadline:
                check_transcript()
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        deaths[pid] = time.monotonic()
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            problems.append(f"{role} child {pid} ended by itself: {_crash(logs[pid][1])}")
            break
        if role == "save":
            # Before any other save: what the killed one left must be whole.
            check_transcript()
        spawn(role)
    for pid, ready in children.values():
        os.close(ready)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        deaths[pid] = time.monotonic()
    check_transcript()
    drained = checker.take_steers(QUEUE)
    return _figures(kills, logs, deaths, drained, checker.messages(TRANSCRIPT), torn, reads, problems)


def _crash(path: Path) -> str:
    for record in _records(path):
        if record["k"] == "crash":
            return str(record["tb"])
    return "no crash recorded"


def _records(path: Path) -> list[dict[str, Any]]:
    records = []
    if not path.exists():
        return records  # killed at the end before it opened its log
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # the one line a kill may cut short
    return records


def _figures(
    kills: int,
    logs: dict[int, tuple[str, Path]],
    deaths: dict[int, float],
    drained: list[str],
    final: list[Any],
    torn: int,
    reads: int,
    problems: list[str],
) -> dict[str, Any]:
    ledger = SteerLedger()
    errors: Counter[str] = Counter()
    attempted_saves: set[tuple[str, int]] = {("parent", 1)}
    killed_takes = killed_adds = killed_saves = 0
    take_deaths: list[float] = []  # when each take in flight was killed
    added_at: dict[str, float] = {}
    for pid, (_, path) in logs.items():
        records = _records(path)
        for record in records:
            if record["k"] == "E":
                errors[record["kind"]] += 1
                if record["problem"]:
                    problems.append(record["problem"])
            elif record["k"] == "S":
                attempted_saves.add((record["w"], record["g"]))
            elif record["k"] == "a":
                ledger.acked.add(record["t"])
            elif record["k"] == "A":
                ledger.attempts[record["t"]] += 1
                added_at[record["t"]] = record["at"]
            elif record["k"] == "t":
                ledger.taken.append(record["s"])
        last = records[-1]["k"] if records else None
        # The process died between announcing an operation and logging its result.
        if last == "T":
            killed_takes += 1
            take_deaths.append(deaths[pid])
        elif last == "A":
            killed_adds += 1
            ledger.unknown_adds[records[-1]["t"]] += 1  # may or may not be queued
        elif last == "S":
            killed_saves += 1
    ledger.taken.append(drained)
    verdict = ledger.verdict()
    # A take killed after its COMMIT removed steers nobody will ever see: from each
    # adder, one run of consecutive steers, all added before the take was killed.
    # More runs than such takes means a steer went missing another way.
    seen = {s for take in ledger.taken for s in take}
    vanishable: dict[str, list[int]] = {}
    for text in ledger.acked - seen:
        adder, _, n = text.rpartition(":")
        vanishable.setdefault(adder, []).append(int(n))
    vanished = sum(len(v) for v in vanishable.values())
    unexplained = 0
    for adder, ns in vanishable.items():
        first = min(added_at[f"{adder}:{n}"] for n in ns)
        could = sum(1 for death in take_deaths if death > first)
        if _runs(sorted(ns)) > could:
            unexplained += len(ns)
    verdict["lost"] = unexplained
    # Nothing raises OutcomeUnknown here: what was in flight is counted above.
    for key in ("adds with unknown outcome", "takes with unknown outcome",
                "steers taken by unknown-outcome takes", "duplicated after OutcomeUnknown retries"):
        verdict.pop(key)
    final_whole = whole(final) if final else None
    if final_whole is None:
        torn += 1
        problems.append("the final transcript is torn")
    elif final_whole not in attempted_saves:
        problems.append(f"the final transcript {final_whole} was never saved")
    return {
        "SIGKILLs": kills,
        "saves / adds / takes in flight when killed": f"{killed_saves} / {killed_adds} / {killed_takes}",
        "transcript reads": reads,
        "torn": torn,
        "steers vanished with killed takes": vanished - unexplained,
        **verdict,
        "errors": dict(errors),
        "problems": problems,
    }


def _runs(numbers: list[int]) -> int:
    return sum(1 for i, n in enumerate(numbers) if i == 0 or n != numbers[i - 1] + 1)
