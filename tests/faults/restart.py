"""Server restarts under a workload of several processes.

Each of ``PROCESSES`` forked children opens its stores once and keeps them for the whole
run (no handle is ever re-created): a saver on a session of its own, an adder and a
taker on one queue all children share, and, given a log store, an appender. The parent
lets them work, stops the server (a fast or immediate shutdown, or SIGKILL of every
server process), keeps it down for ``DOWN`` seconds (longer, up to ``DOWN_AT_MOST``, until
a child's call began and failed inside the outage), starts it again, and so on; then
tells the children to stop, and each runs one more of every operation on the same
handles and reports what it saw. Every call is timed on CLOCK_MONOTONIC, one clock for
every process, so the parent knows which calls fell inside an outage.

Judged as the other fault tests judge: lost, duplicated, unexpected, reordered steers;
torn transcripts; failed calls whose write landed anyway (a failed save read back later,
a failed add taken, a failed log batch found in the log); errors that are not a
StoreError naming operation, session and cause; plus every call inside an outage
failing within the bound, and every handle working afterwards.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from storetest.contract import Message, OutcomeUnknown
from storetest.entries import Entry
from tests.faults.proxy import CuttingProxy, Marker
from tests.faults.servers import PrivateServer, Stop
from tests.faults.workload import SteerLedger, error_kind, error_problem, transcript, whole

QUEUE = "restart-queue"
PROCESSES = 3
WORK = 0.5  # seconds of work before each stop, and after the last start
DOWN = 1.0  # seconds the server stays down: long enough for calls to start and fail inside
#: ... and longer, up to this, until a child's call began and ended inside the outage (a
#: loaded machine may not run one in DOWN seconds: then the outage would test nothing).
DOWN_AT_MOST = 6.0
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

#: Opens, in a child, ``{"store": ..., "log": ... or None}`` (on its event loop if async).
Opener = Callable[[], Any]


async def _call(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class _Child:
    """One child's workers and what they saw."""

    def __init__(self, name: str, last_failed: Any = None) -> None:
        self.name = name
        #: Shared with the parent: (start, end) of this child's latest failed call.
        self.last_failed = last_failed
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ledger = SteerLedger()
        self.calls: list[tuple[str, float, float, str]] = []  # op, start, end, outcome
        self.problems: list[str] = []
        self.torn = 0
        self.failed_but_landed = 0
        self.batches: dict[str, tuple[str, list[str]]] = {}  # first id: outcome, ids

    async def attempt(self, op: str, session: str, call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
        start = time.monotonic()
        try:
            result, exc, outcome = await _call(call()), None, "ok"
        except Exception as e:
            result, exc, outcome = None, e, error_kind(e)
            problem = error_problem(op, session, e)
            if problem:
                with self.lock:
                    self.problems.append(problem)
        end = time.monotonic()
        with self.lock:
            self.calls.append((op, start, end, outcome))
        if exc is not None and self.last_failed is not None:
            self.last_failed[0], self.last_failed[1] = start, end
        return result, exc

    async def saver(self, store: Any) -> None:
        session = f"{self.name}-transcript"
        possible = {("", 0)}
        failed: set[tuple[str, int]] = set()
        generation = 0
        while not self.stop.is_set():
            generation += 1
            messages = transcript(self.name, generation)
            new = whole(messages)
            assert new is not None
            _, exc = await self.attempt("save", session, partial(store.save, session, messages))
            if exc is None:
                possible = {new}
            elif isinstance(exc, OutcomeUnknown):
                possible = possible | {new}
            elif new != ("", 0):
                failed.add(new)
            got, exc = await self.attempt("messages", session, partial(store.messages, session))
            if exc is not None:
                await asyncio.sleep(0.01)
                continue
            seen = whole(got)
            with self.lock:
                if seen is None:
                    self.torn += 1
                    self.problems.append(f"{session}: torn transcript read")
                elif seen in failed:
                    self.failed_but_landed += 1
                    self.problems.append(f"{session}: a failed save landed: {seen}")
                elif seen not in possible:
                    self.problems.append(f"{session}: holds {seen}; expected one of {sorted(possible)}")
            if seen is not None:
                possible = {seen}

    async def adder(self, store: Any) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            text = f"{self.name}:{n}"
            for _ in range(50):
                _, exc = await self.attempt("add_steer", QUEUE, partial(store.add_steer, QUEUE, text))
                with self.lock:
                    self.ledger.added(text, exc)
                if not isinstance(exc, OutcomeUnknown):
                    break
            if exc is not None:
                await asyncio.sleep(0.01)

    async def taker(self, store: Any) -> None:
        while not self.stop.is_set():
            got, exc = await self.attempt("take_steers", QUEUE, partial(store.take_steers, QUEUE))
            with self.lock:
                self.ledger.took(got, exc)
            if not got:
                await asyncio.sleep(0.005)

    async def appender(self, log: Any) -> None:
        session = f"{self.name}-log"
        rng = random.Random(self.name)
        n = 0
        while not self.stop.is_set():
            n += 1
            size = rng.randint(1, 3)
            ids = [f"{self.name}-{n}-{i}of{size}" for i in range(size)]
            batch = [Entry.message(i, None, T0, Message.text("user", i)) for i in ids]
            _, exc = await self.attempt("append", session, partial(log.append, session, batch))
            outcome = "ok" if exc is None else "unknown" if isinstance(exc, OutcomeUnknown) else "failed"
            with self.lock:
                self.batches[ids[0]] = (outcome, ids)
            if exc is not None:
                await asyncio.sleep(0.01)

    def report(self, after: list[str]) -> dict[str, Any]:
        ledger = self.ledger
        return {
            "attempts": dict(ledger.attempts), "unknown_adds": dict(ledger.unknown_adds),
            "acked": sorted(ledger.acked), "taken": ledger.taken, "unknown_takes": ledger.unknown_takes,
            "calls": self.calls, "problems": self.problems, "torn": self.torn,
            "failed_but_landed": self.failed_but_landed, "batches": self.batches, "after": after,
            "name": self.name,
        }


async def _working_after(child: _Child, stores: dict[str, Any]) -> list[str]:
    """One of every operation on the same handles; what failed."""
    store, log = stores["store"], stores.get("log")
    session = f"{child.name}-after"
    failures = []
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("save", partial(store.save, session, [Message.text("user", "after")])),
        ("messages", partial(store.messages, session)),
        ("add_steer", partial(store.add_steer, session, "after")),
        ("take_steers", partial(store.take_steers, session)),
    ]
    if log is not None:
        entry = Entry.message(session, None, T0, Message.text("user", "a"))
        calls.append(("append", partial(log.append, session, [entry])))
    for op, call in calls:
        try:
            await _call(call())
        except Exception as exc:
            failures.append(f"{child.name} {op}: {exc}")
    return failures


def _child_main(name: str, open_stores: Opener, stop_read: int, out: int, last_failed: Any = None) -> None:
    child = _Child(name, last_failed)

    def watch() -> None:
        os.read(stop_read, 1)
        child.stop.set()

    threading.Thread(target=watch, daemon=True).start()

    async def main() -> dict[str, Any]:
        stores = await _call(open_stores())
        store, log = stores["store"], stores.get("log")
        roles = [partial(child.saver, store), partial(child.adder, store), partial(child.taker, store)]
        if log is not None:
            roles.append(partial(child.appender, log))
        if inspect.iscoroutinefunction(store.save):
            await asyncio.gather(*(r() for r in roles))
        else:  # plain methods block: one thread (and loop) per worker
            threads = [threading.Thread(target=asyncio.run, args=(r(),)) for r in roles]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return child.report(await _working_after(child, stores))

    try:
        report = asyncio.run(main())
    except BaseException as exc:
        report = {"crash": repr(exc)}
    data = json.dumps(report).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(out, view):]


def run(server: PrivateServer, proxy: CuttingProxy, commit: Marker, open_stores: Opener,
        drain: Callable[[], list[str]], read_log: Callable[[str], list[str]] | None,
        stops: list[Stop], bound: float, commit_name: str = "COMMIT") -> dict[str, Any]:
    """Restart ``server`` once per item of ``stops`` under the workload; the figures.

    The children reach the server through ``proxy``. For each stop, and once more with
    SIGKILL "at COMMIT": the proxy stalls the network right after the next COMMIT
    (``commit``, as it goes on the wire; a Redis store's write, ``commit_name`` says
    which) went up, the server is killed then, and the network comes back once the
    server has: that COMMIT's caller got no answer. Every steer acknowledged and never
    returned by a take (the children's, then ``drain``'s) counts as lost, unless a take
    raised OutcomeUnknown with it in ``steers``."""
    children = []
    # Each child's latest failed call, (start, end), in memory shared across the fork
    # (CLOCK_MONOTONIC is the machine's: the parent compares it with its own).
    last_failed = [multiprocessing.RawArray("d", 2) for _ in range(PROCESSES)]
    for i in range(PROCESSES):
        stop_r, stop_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(stop_w)
                os.close(out_r)
                _child_main(f"p{i}", open_stores, stop_r, out_w, last_failed[i])
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(stop_r)
        os.close(out_w)
        children.append((pid, stop_w, out_r))
    outages: list[tuple[str, float, float, float]] = []  # how, stopped, starting, ready
    for how, at_commit in [*((h, False) for h in stops), ("SIGKILL", True)]:
        time.sleep(WORK)
        if at_commit:
            proxy.stall_after_commit(commit)
            proxy.stalled.wait(5)
            time.sleep(0.2)  # the server has committed by now
        server.stop(how)
        # While the server is down its port refuses connections; the proxy's must too,
        # or a driver reaches the proxy, is dropped, and cannot tell it sent nothing.
        proxy.refuse()
        stopped = time.monotonic()
        time.sleep(DOWN)
        while time.monotonic() - stopped < DOWN_AT_MOST and not any(stopped <= a[0] <= a[1] for a in last_failed):
            time.sleep(0.05)
        starting = time.monotonic()
        server.start()
        proxy.accept_again()
        proxy.resume()
        outages.append((f"{how} at {commit_name}" if at_commit else how, stopped, starting, time.monotonic()))
    time.sleep(WORK)
    reports = []
    for _, stop_w, _ in children:
        os.write(stop_w, b"s")
    for pid, stop_w, out_r in children:
        chunks = []
        while chunk := os.read(out_r, 1 << 20):
            chunks.append(chunk)
        os.waitpid(pid, 0)
        os.close(stop_w)
        os.close(out_r)
        reports.append(json.loads(b"".join(chunks) or b'{"crash": "no report"}'))
    return _figures(reports, outages, drain(), read_log, bound)


def _figures(reports: list[dict[str, Any]], outages: list[tuple[str, float, float, float]],
             drained: list[str], read_log: Callable[[str], list[str]] | None, bound: float) -> dict[str, Any]:
    problems: list[str] = [f"a child crashed: {r['crash']}" for r in reports if "crash" in r]
    reports = [r for r in reports if "crash" not in r]
    ledger = SteerLedger()
    for r in reports:
        ledger.attempts.update(r["attempts"])
        ledger.unknown_adds.update(r["unknown_adds"])
        ledger.acked.update(r["acked"])
        ledger.taken += r["taken"]
        ledger.unknown_takes += r["unknown_takes"]
        problems += r["problems"]
    ledger.taken.append(drained)
    calls = [c for r in reports for c in r["calls"]]
    rows = []
    for how, stopped, starting, ready in outages:
        inside = [c for c in calls if stopped <= c[1] and c[2] <= starting]
        slowest = max((end - start for _, start, end, _ in inside), default=0.0)
        rows.append({
            "stop": how, "down (s)": round(ready - stopped, 1), "calls inside": len(inside),
            "failed": sum(c[3] != "ok" for c in inside),
            "slowest (s)": round(slowest, 2),
            "OutcomeUnknown around it": sum(
                c[3].startswith("OutcomeUnknown") for c in calls if stopped - 1 <= c[1] <= ready),
        })
        problems += [f"{c[0]} succeeded while the server was down ({how})" for c in inside if c[3] == "ok"]
        if not inside:  # else "every call inside failed" holds of nothing
            problems.append(f"no call began and ended inside the outage ({how}): nothing was tested there")
    problems += [f"{op} took {end - start:.2f} s (bound {bound} s)" for op, start, end, _ in calls
                 if end - start > bound + 1]
    landed_batches = torn_batches = 0
    if read_log is not None:
        for r in reports:
            session = f"{r['name']}-log"
            present = set(read_log(session))
            for outcome, ids in r["batches"].values():
                found = sum(i in present for i in ids)
                if 0 < found < len(ids):
                    torn_batches += 1
                    problems.append(f"{session}: batch {ids[0]} in part")
                elif found and outcome == "failed":
                    landed_batches += 1
                    problems.append(f"{session}: a failed batch landed: {ids[0]}")
                elif not found and outcome == "ok":
                    problems.append(f"{session}: an acknowledged batch is missing: {ids[0]}")
    after = [f for r in reports for f in r["after"]]
    problems += after
    verdict = ledger.verdict()
    errors = Counter(c[3] for c in calls if c[3] != "ok")
    return {
        "restarts": rows,
        "operations": dict(Counter(c[0] for c in calls)),
        "torn": sum(r["torn"] for r in reports) + torn_batches,
        "failed saves that changed something": sum(r["failed_but_landed"] for r in reports),
        "failed log batches that landed": landed_batches,
        **verdict,
        "errors": dict(errors),
        "errors not a StoreError naming operation, session and cause": sum(
            1 for p in problems if "raised" in p or "does not name" in p or "hides" in p),
        "handles failing after the last restart": len(after),
        "problems": problems,
    }
