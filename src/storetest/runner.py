"""``storetest.check`` (defined here): run the clauses against a store in code and get every verdict.

The one way the suite runs. The pytest plugin calls it once per clause test, the
``storetest check`` command once per run, and the project's own tests call it on
broken stores, as Go's ``fstest.TestFS`` is one call that returns every violation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from storetest._engine import forking, stops, workers
from storetest._engine.backends import ChildDied
from storetest._engine.failures import Violation, conformance_failures, describe_exception, store_frames
from storetest._engine.harness import (
    CAPABILITIES,
    FactoryError,
    SetupFailure,
    StoreShapeError,
    Target,
    code_roots,
    declared_capabilities,
    new_nonce,
    open_target,
    parameter_names,
)
from storetest._engine.profiles import Profile, check_call_timeout, check_idle, profile_named
from storetest._engine.servers.redis import new_prefix
from storetest.clauses import CLAUSES, Clause
from storetest.clauses._support import (
    ended_by_the_store,
    hypothesis_home,
    reporting_to,
    shrink_budget,
    stopped_shrinking_early,
)
from storetest.results import (
    ClauseResult,
    Interrupted,
    Outcome,
    Progress,
    Report,
    interrupted_line,
    not_claimed,
    versions,
)

__all__ = ["ClauseResult", "Interrupted", "Outcome", "Progress", "Report", "check", "check_reopen", "default_name",
           "unsupplied", "with_reopen_advice", "with_replica_advice"]

SKIP_NO_IDLE: Final = (
    "opt-in: pass idle=SECONDS (--storetest-idle SECONDS, storetest check --idle SECONDS) to write, "
    "wait that long and read back; no other clause can see data that expires"
)
SKIP_NO_REPLICA: Final = (
    "needs a second handle on the same data: {how} "
    "(its parameters are like the factory's; one named 'primary' gets the first store)"
)
#: How a caller of :func:`check` gives a replica (the plugin and the command say it their way).
CHECK_REPLICA: Final = "pass replica=<factory> to check()"
SKIP_NO_REOPEN: Final = (
    "opt-in: kills a child process writing through the store, then reopens the data; {how}, a "
    "function whose parameters are named like the factory's (tmp_path, a database URL, "
    "a prefix) and that opens the same data in any process (often the factory itself)"
)
CHECK_REOPEN: Final = "pass reopen=<factory> to check()"
RACE_NOTE: Final = (
    "this clause races: a seed replays its inputs, not the interleaving of its calls; "
    "it runs {rounds} rounds or more so that a verdict does not hang on luck"
)
_DATABASE_FIXTURES: Final = {
    "storetest_postgres_url": "postgres",
    "storetest_mysql_url": "mysql",
    "storetest_mongodb_url": "mongodb",
    "storetest_redis_url": "redis",
    "storetest_redis_cluster_url": "redis-cluster",
}
#: Beside the Redis URLs: the key prefix their keys go under (one for both).
_REDIS_PREFIX: Final = "storetest_redis_prefix"
#: How a failure begins when its clause asks more than the store's protocol documents.
BEYOND: Final = "beyond the protocol's promise"
#: The factory parameters :func:`check` fills by itself.
SUPPLIED: Final = ("tmp_path", *_DATABASE_FIXTURES, _REDIS_PREFIX)
#: Where :func:`check` makes each clause's ``tmp_path`` when it can: a tmpfs, in RAM,
#: where a store's fsyncs cost nothing, as the throwaway servers run with fsync off (no
#: clause tests a power cut; the crash clauses kill processes, which loses nothing the
#: kernel was given). Used only with this much room, and only when no ``TMPDIR``,
#: ``TEMP`` or ``TMP`` names a directory of the user's choosing.
RAM_DIRECTORY: Final = "/dev/shm"
RAM_DIRECTORY_MIN_FREE: Final = 1 << 30


def scratch_directory() -> str | None:
    """The directory each clause's ``tmp_path`` is made in: :data:`RAM_DIRECTORY` if it
    is a writable tmpfs with :data:`RAM_DIRECTORY_MIN_FREE` bytes free and the
    environment names no temporary directory; otherwise ``None``, :mod:`tempfile`'s
    choice. (A tmpfs's free bytes are its size limit's, not the machine's free RAM; each
    clause's directory is removed when the clause ends.)"""
    if any(os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")):
        return None
    try:
        room = os.statvfs(RAM_DIRECTORY)
    except (OSError, AttributeError):  # no such directory, or no statvfs (Windows)
        return None
    if room.f_bavail * room.f_frsize < RAM_DIRECTORY_MIN_FREE or not os.access(RAM_DIRECTORY, os.W_OK | os.X_OK):
        return None
    return RAM_DIRECTORY if _on_tmpfs(RAM_DIRECTORY) else None


def _on_tmpfs(path: str) -> bool:
    """Whether ``path`` is on a tmpfs, by the kernel's mount table (Linux; ``False``
    where there is none)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as table:
            mounts = [fields[1:3] for fields in map(str.split, table) if len(fields) >= 3]
    except OSError:
        return False
    real = os.path.realpath(path)
    holding = [(point, kind) for point, kind in mounts
               if real == point or real.startswith(point.rstrip("/") + "/")]
    return bool(holding) and max(holding, key=lambda m: len(m[0]))[1] == "tmpfs"


def check(
    factory: Callable[..., Any],
    replica: Callable[..., Any] | None = None,
    *,
    clauses: Iterable[str] | None = None,
    profile: str | Profile | None = None,
    seed: int | None = None,
    nonce: str | None = None,
    name: str | None = None,
    skip: Mapping[str, str] | None = None,
    fixtures: Mapping[str, Any] | Callable[[str], Any] | None = None,
    progress: Callable[[Progress], None] | None = None,
    heartbeat: float = 10.0,
    idle: float | None = None,
    reopen: Callable[..., Any] | None = None,
    call_timeout: float | None = None,
    jobs: int = 1,
) -> Report:
    """Run the conformance clauses against the store ``factory`` makes; return every verdict.

    :param factory: makes the store under test, afresh for each clause: a plain or
        async function, or a (async) generator that yields the store and tears it
        down after the ``yield``. Its parameters are filled by name from ``fixtures``;
        ``check`` itself supplies ``tmp_path`` (a new directory per clause, in
        ``/dev/shm`` where it is a tmpfs with room and no ``TMPDIR`` is set: see
        :func:`scratch_directory`) and the
        throwaway-database URLs ``storetest_postgres_url``, ``storetest_mysql_url``,
        ``storetest_mongodb_url``, ``storetest_redis_url`` and
        ``storetest_redis_cluster_url``, with ``storetest_redis_prefix`` (see
        :mod:`storetest.databases`).
    :param replica: makes a second handle on the same data, for the replica clauses;
        a parameter named ``primary`` receives the store ``factory`` made. Without
        it, those clauses are skipped with a reason that says so.
    :param clauses: names of the clauses to run (default: all, in order).
    :param profile: ``"fast"`` (default, or ``STORETEST_PROFILE``), ``"ci"``,
        ``"thorough"``, or a :class:`~storetest._engine.profiles.Profile`.
    :param seed: decides every generated input (default: a random one, in the report).
    :param nonce: with the seed, fixes every session id; pass a report's nonce to
        replay its run with the same sessions (default: a fresh one).
    :param name: the run's label in the report (default: the store's class name; for a
        binding, the class of the sessions or service it opened; else the factory's name).
    :param skip: clause names mapped to the reason this store cannot honestly run them.
    :param fixtures: values for the factories' parameters: a mapping, or a function
        from a name to its value (the pytest plugin passes ``request.getfixturevalue``).
    :param progress: called with a :class:`Progress` when each clause starts, every
        ``heartbeat`` seconds while it runs, and with its result when it ends.
    :param heartbeat: seconds between progress calls during a clause.
    :param idle: seconds ``data_survives_idle`` waits between writing and reading back
        (the suite cannot see expiry otherwise); ``None``, the default, skips it.
    :param reopen: opens the data ``factory``'s store wrote, as a new handle, in any
        process: any callable (a lambda too; where children are spawned rather than
        forked, a function at the top level of an importable module, which they import
        as ``module:function``), whose parameters are named like the factory's and get
        the same values, the data's location (``tmp_path``, a database
        URL, a key prefix); often the factory itself. With it the crash clauses run; without
        it they are skipped with a reason that says so.
    :param call_timeout: seconds one call into the store or a factory may take
        (default: the profile's, 60). A call past it is a violation naming the call, the
        session and the seconds waited, and its clause ends: an async call is
        cancelled; a plain call cannot be stopped, so the thread it runs on (the clause's
        own, for a plain store) is abandoned and the clause's teardown skipped; a plain
        factory is stopped by an exception raised inside it (in the main thread; for a
        plain store, one a clause opens itself is abandoned as a plain call is). The
        heartbeat names the calls in flight.
    :param jobs: how many processes may share the clauses (default 1; ``storetest
        check`` shares them between two where it can): each clause runs on a store of
        its own, with the same inputs and sessions whichever process takes it, so the
        report is the one a single process gives but for the seconds (and, where a run
        stops early, the clause each other process had in flight: its own verdict); the
        clauses that race threads or kill processes run last, in this process, with no
        other running (see :mod:`storetest._engine.workers`). Where sharing is not safe every clause
        runs in this process (``storetest check --jobs 2`` says why): the factories must take
        ``tmp_path`` and no database URL, no ``fixtures`` may be given, and this process
        may hold no network connection nor run another thread. ``progress`` is called in
        this process for every clause.
    :raises Interrupted: Ctrl-C (SIGINT, in the main thread) stopped the run: the clause
        in flight is reported ``interrupted``, its teardown has run, and the exception's
        ``report`` holds the verdicts so far. A second Ctrl-C exits at once (status 130).
    :raises TypeError: ``factory`` or ``replica`` is not callable, a factory has a
        parameter nothing supplies, or ``reopen`` cannot be imported by a child process.
    :raises ValueError: an unknown clause name in ``clauses`` or ``skip``, or an
        unknown profile, or an ``idle`` or ``call_timeout`` that is not a number of
        seconds above zero, or ``jobs`` below 1.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r}: give a whole number of processes, 1 or more")
    for label, fn in (("factory", factory), ("replica", replica)):
        if fn is not None and not callable(fn):
            raise TypeError(
                f"check({label}=...) must be a callable that returns a store, not "
                f"{type(fn).__name__}; e.g. check(lambda: MyStore())"
            )
    given_replica = replica
    if replica is None:  # a binding that knows how to open a second handle (item_sessions)
        replica = getattr(factory, "storetest_replica", None)
    check_reopen(reopen, "check(reopen=...)")
    known = [c.name for c in CLAUSES]
    # A binding knows what its protocol lacks (a chat history has no pop) and what asks more
    # than the protocol documents; the caller's own skips come on top.
    skip = {**getattr(factory, "storetest_skip", {}), **dict(skip or {})}
    beyond: Mapping[str, str] = getattr(factory, "storetest_beyond", {})
    selected = list(known) if clauses is None else list(clauses)
    for what, names in (("clauses", selected), ("skip", skip)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"{what}= names unknown clauses {unknown}; the clauses are: {', '.join(known)}")
    chosen = profile if isinstance(profile, Profile) else profile_named(profile)
    if idle is not None:
        chosen = dataclasses.replace(chosen, idle=check_idle(idle))
    deadline = check_call_timeout(call_timeout)
    if deadline is not None:
        chosen = dataclasses.replace(chosen, call_timeout=deadline)
    run_seed = random.randrange(2**32) if seed is None else int(seed)
    run_nonce = nonce or new_nonce()
    wanted = set(selected)
    order = [c for c in CLAUSES if c.name in wanted]
    verdicts: dict[int, ClauseResult] = {}  # by position in ``order``
    capabilities: tuple[str, ...] = ()
    partial: dict[str, list[str]] = {}
    store_type = ""
    found_any = False
    declared = declared_capabilities(factory)
    stopped = ""
    not_reached: list[int] = []
    started = datetime.now(UTC).isoformat(timespec="seconds")
    watch = stops.Watch(chosen.call_timeout)
    children = _needs_children(order, skip, reopen)
    team = None
    if jobs > 1 and not workers.refusal([factory, replica, reopen], fixtures):
        # Forks here, before a thread or a factory call. A race, and a clause that kills
        # processes, runs alone: beside a busy process the races' threads, which yield
        # to each other at every line, took four times as long (benchmarks/race_beside.py).
        team = workers.Team(jobs, *_sharing(order))
        if team.worker:
            watch.quiet = True
            progress = functools.partial(team.send, "progress")
        else:
            watch.workers = team.pids
            progress = _one_at_a_time(progress)

    def heard(message: tuple[Any, ...]) -> None:  # a worker's verdict or progress, on its relay thread
        kind, *rest = message
        if kind == "verdict":
            position, result = rest
            verdicts[position] = result
            rest = [Progress(result.clause, position, len(order), result.seconds, 0, result)]
        if progress is not None:
            progress(rest[0])

    try:
        # A worker runs no clause with children of its own: those run alone, in the parent.
        serve = children and not (team is not None and team.worker)
        with forking.serving([factory, reopen], serve), stops.watching(watch), hypothesis_home(), \
                _Supplier(fixtures, [factory, *([replica] if replica else []),
                                     *([reopen] if reopen else [])]) as supply:
            if team is not None and not team.worker:
                team.relay(heard)
            for position in team.positions() if team is not None else range(len(order)):
                c = order[position]
                claims = set(capabilities) if found_any else declared
                if stopped or watch.interrupted or (team is not None and team.stopped()):
                    # Not reached, unless what the store claims is known to leave it out.
                    if claims is not None and c.needs - claims:
                        result = not_claimed(c.name, c.needs - claims, CAPABILITIES, promise=c.promise,
                                             topic=c.topic, exists_for=c.exists_for)
                        verdicts[position] = result
                        if team is not None and team.worker:
                            team.send("verdict", position, result)
                    else:
                        not_reached.append(position)
                    continue
                index = CLAUSES.index(c)
                if c.name in skip:
                    result = ClauseResult(c.name, "skipped", skip[c.name], promise=c.promise, topic=c.topic,
                                          exists_for=c.exists_for)
                elif ((c.processes or (c.reopen and reopen is not None)) and not c.needs - (claims or c.needs)
                      and (unguarded := _unguarded_main())):
                    result = ClauseResult(c.name, "error", unguarded, promise=c.promise, topic=c.topic,
                                          exists_for=c.exists_for)
                elif c.processes and not c.needs - (claims or c.needs) and (unspawnable := _unspawnable(factory)):
                    result = ClauseResult(c.name, "skipped", unspawnable, promise=c.promise, topic=c.topic,
                                          exists_for=c.exists_for)
                elif c.replica and replica is None and claims is not None:
                    # Decided without making a store: what it claims is known already.
                    result = (not_claimed(c.name, c.needs - claims, CAPABILITIES, promise=c.promise, topic=c.topic,
                                          exists_for=c.exists_for) if c.needs - claims else
                              ClauseResult(c.name, "skipped", SKIP_NO_REPLICA.format(how=CHECK_REPLICA),
                                           promise=c.promise, topic=c.topic, exists_for=c.exists_for))
                elif c.reopen and reopen is None and claims is not None:
                    result = (not_claimed(c.name, c.needs - claims, CAPABILITIES, promise=c.promise, topic=c.topic,
                                          exists_for=c.exists_for) if c.needs - claims else
                              ClauseResult(c.name, "skipped", SKIP_NO_REOPEN.format(how=CHECK_REOPEN),
                                           promise=c.promise, topic=c.topic, exists_for=c.exists_for))
                elif c.idle and chosen.idle is None:
                    result = ClauseResult(c.name, "skipped", SKIP_NO_IDLE, promise=c.promise, topic=c.topic,
                                          exists_for=c.exists_for)
                elif found_any and c.needs - set(capabilities):
                    # What a store made by this factory claims is known: making another
                    # (a file, a connection, a schema) only to say so again costs each of
                    # the clauses it does not claim a setup.
                    result = not_claimed(c.name, c.needs - set(capabilities), CAPABILITIES, promise=c.promise,
                                         topic=c.topic, exists_for=c.exists_for)
                else:
                    state = Progress(c.name, position, len(order))
                    # Twice within the deadline at least: a call in flight is named before it ends the clause.
                    with _beating(progress, state, min(heartbeat, max(0.2, watch.timeout / 2)), watch):
                        result, found = _run(c, index, factory, replica, supply, chosen, run_seed, run_nonce, state,
                                             reopen=reopen)
                    if found is not None:
                        capabilities, partial, named = found
                        store_type = store_type or named  # a binding knows its store's class once it opened one
                        found_any = True
                    if result.outcome == "error" and result.setup:
                        # The factory fails the same way for every clause: say it once.
                        stopped = result.diagnosis
                        if team is not None:
                            team.stop()
                if result.outcome == "failed" and c.name in beyond:
                    result = dataclasses.replace(result, diagnosis=f"{BEYOND}: {result.diagnosis}",
                                                 remarks=(*result.remarks, beyond[c.name]))
                verdicts[position] = result
                if team is not None and team.worker:
                    team.send("verdict", position, result)  # the parent calls progress for it
                elif progress is not None:
                    progress(Progress(c.name, position, len(order), result.seconds, 0, result))
            if team is not None and not team.worker:
                team.ended()
                for end in team.learned():
                    not_reached.extend(end["not_reached"])
                    if not found_any and end["found_any"]:
                        capabilities, partial, found_any = end["capabilities"], end["partial"], True
                    store_type = store_type or end["store_type"]
                    stopped = stopped or end["stopped"]
                    watch.interrupted = watch.interrupted or end["interrupted"]
                for position, what in team.unanswered({*verdicts, *not_reached}):
                    c = order[position]
                    verdicts[position] = ClauseResult(
                        c.name, "error", f"{what}: no verdict on the store; to run every clause in one process, "
                        "rerun with storetest check --jobs 1 (check(jobs=1))",
                        promise=c.promise, topic=c.topic, exists_for=c.exists_for)
    except BaseException as exc:
        if team is not None and team.worker:
            team.died(exc)
        if team is not None:
            team.abandon()
        raise
    if team is not None and team.worker:
        team.finish(capabilities=capabilities, partial=partial, found_any=found_any, store_type=store_type,
                    stopped=stopped, not_reached=not_reached, interrupted=watch.interrupted)
    results = [verdicts[p] for p in sorted(verdicts)]
    deselected = tuple(n for n in known if n not in wanted)
    report = Report(
        name=name or store_type or default_name(factory),
        profile=chosen.name,
        seed=run_seed,
        nonce=run_nonce,
        results=tuple(results),
        capabilities=capabilities,
        partial=partial,
        not_run=(*deselected, *(order[p].name for p in sorted(not_reached))),
        deselected=deselected,
        stopped=stopped,
        target=_qualified(factory),
        replica=_qualified(given_replica) if given_replica else "",
        started=started,
        versions=versions(),
        interrupted=interrupted_line(Counter(r.outcome for r in results), len(not_reached))
        if watch.interrupted else "",
    )
    if watch.interrupted:
        raise Interrupted(report)
    return report


def _sharing(order: Sequence[Clause]) -> tuple[list[int], list[int]]:
    """The positions in ``order`` that processes share, in the order they take them, and
    those the first process runs alone once the others have ended (races, clauses that
    kill processes). The dearest are taken first: a state machine taken last kept its
    process running it while the other, done, waited for it."""
    alone = [p for p, c in enumerate(order) if c.races or c.processes or c.reopen]
    shared = sorted(set(range(len(order))) - set(alone), key=lambda p: (-order[p].cost, p))
    return shared, alone


def _needs_children(order: Iterable[Clause], skip: Mapping[str, str], reopen: Callable[..., Any] | None) -> bool:
    """Whether a clause of the run forks or spawns processes of its own."""
    return any((c.processes or (c.reopen and reopen is not None)) and c.name not in skip for c in order)


def _one_at_a_time(progress: Callable[[Progress], None] | None) -> Callable[[Progress], None] | None:
    """``progress``, called by one thread at a time (this process's and the workers' relays)."""
    if progress is None:
        return None
    lock = threading.Lock()

    def serialized(state: Progress) -> None:
        with lock:
            progress(state)

    return serialized


def check_reopen(reopen: Callable[..., Any] | None, where: str) -> None:
    """Refuse a ``reopen`` that a child process could not import.

    :raises TypeError: not callable, or a lambda or nested function.
    """
    if reopen is None:
        return
    if not callable(reopen):
        raise TypeError(f"{where} must be a function that opens the store's data, not {type(reopen).__name__}")
    problem = _unspawnable(reopen, "reopen factory")
    if problem:
        raise TypeError(f"{where}: {problem}")


def with_reopen_advice(report: Report, how: str) -> Report:
    """``report`` with each crash clause's skip saying ``how`` to give ``reopen`` in the
    caller's own terms (``--reopen MODULE:FACTORY`` on the command line)."""
    ours = SKIP_NO_REOPEN.format(how=CHECK_REOPEN)
    results = tuple(dataclasses.replace(r, diagnosis=SKIP_NO_REOPEN.format(how=how))
                    if r.outcome == "skipped" and r.diagnosis == ours else r for r in report.results)
    return dataclasses.replace(report, results=results)


def with_replica_advice(report: Report, how: str) -> Report:
    """``report`` with each replica clause's skip saying ``how`` to give a replica in
    the caller's own terms (``--replica MODULE:FACTORY`` on the command line)."""
    ours = SKIP_NO_REPLICA.format(how=CHECK_REPLICA)
    results = tuple(dataclasses.replace(r, diagnosis=SKIP_NO_REPLICA.format(how=how))
                    if r.outcome == "skipped" and r.diagnosis == ours else r for r in report.results)
    return dataclasses.replace(report, results=results)


def _unguarded_main() -> str:
    """Why child processes cannot be spawned from here, or "": ``check()`` called from a
    script's top level, outside ``if __name__ == "__main__":``. Each spawned child
    re-runs that script from its top, so it would run check() again and fail with
    multiprocessing's RuntimeError about the bootstrapping phase."""
    import ast
    import sys

    if not forking.unavailable():
        return ""  # forked children do not re-run the script
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not path.endswith(".py"):
        return ""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return ""  # called from a function: the guard, if any, is around its call
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return ""
    line = frame.f_lineno
    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(
                    node.test):
                return ""
            break
    return (f"this clause runs the store in child processes, which are spawned: each re-runs the script "
            f"{Path(path).name!r} from its top, and so would call check() again. Put the call under "
            "`if __name__ == \"__main__\":` in that script (line " f"{line}), as multiprocessing requires")


def _unspawnable(factory: Callable[..., Any], label: str = "factory") -> str:
    """Why ``factory`` cannot be opened in a child process, or "" (forked, any can)."""
    from storetest._engine.backends import SpawnError, spawn_reference

    if not forking.unavailable():
        return ""

    try:
        spawn_reference(factory, label)
    except SpawnError as exc:
        return str(exc)
    return ""


def _qualified(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


@contextlib.contextmanager
def _beating(progress: Callable[[Progress], None] | None, state: Progress, every: float,
             watch: stops.Watch) -> Iterator[None]:
    """Call ``progress`` now and every ``every`` seconds until the block ends, naming
    the calls in flight."""
    if progress is None:
        yield
        return
    progress(state)
    began = time.perf_counter()
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            state.elapsed = time.perf_counter() - began
            state.in_flight = tuple(watch.flying())
            progress(state)

    thread = threading.Thread(target=beat, name="storetest-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def default_name(factory: Callable[..., Any]) -> str:
    """A run's name when neither its caller nor its store's class names it: the
    factory's name ("store" for a lambda). The command and the plugin put the name the
    author gave the factory (``mod:sessions``) in its place."""
    name = getattr(factory, "__name__", "store").strip("_<>") or "store"
    return "store" if name == "lambda" else name


def _store_name(store: object) -> str:
    """The class of the store under test: a binding's (``storetest_store_name()``: the
    sessions it opened), or the store's own; "" while a binding has opened none."""
    named = getattr(store, "storetest_store_name", None)
    return named() if callable(named) else type(store).__name__


def _run(
    c: Clause, index: int, factory: Callable[..., Any], replica: Callable[..., Any] | None,
    supply: _Supplier, profile: Profile, seed: int, nonce: str, state: Progress,
    reopen: Callable[..., Any] | None = None,
) -> tuple[ClauseResult, tuple[tuple[str, ...], dict[str, list[str]], str] | None]:
    """Run one clause on a fresh store; never raises (but KeyboardInterrupt). Also
    returns what the store claims, what it has in part, and its class's name."""
    started = time.perf_counter()
    found = None
    result: ClauseResult | None = None

    def done(outcome: Outcome, diagnosis: str = "", **extra: Any) -> ClauseResult:
        return ClauseResult(c.name, outcome, diagnosis, seconds=round(time.perf_counter() - started, 3),
                            races=c.races, promise=c.promise, topic=c.topic, exists_for=c.exists_for, **extra)

    try:
        with supply.values() as values, open_target(
            c.name, factory, replica, values, profile, seed, nonce, tag=f"c{index}"
        ) as t:
            t.progress = state
            t.reopen = reopen
            claimed = set.intersection(*(set(h.capabilities) for h in t.handles()))
            found = (tuple(sorted(claimed)), dict(t.store.partial), _store_name(t.store.raw))
            missing = c.needs - claimed
            if missing:
                # Before the replica's absence: a store without the capability does not
                # need a second handle for it.
                result = not_claimed(c.name, missing, CAPABILITIES, promise=c.promise, topic=c.topic,
                                     exists_for=c.exists_for, seconds=round(time.perf_counter() - started, 3))
            elif c.replica and replica is None:
                result = done("skipped", SKIP_NO_REPLICA.format(how=CHECK_REPLICA))
            elif c.reopen and reopen is None:
                result = done("skipped", SKIP_NO_REOPEN.format(how=CHECK_REOPEN))
            else:
                result = _verdict(c, t, done)
                if not found[2]:
                    found = (*found[:2], _store_name(t.store.raw))
    except stops.Interrupt:
        result = done("interrupted", "interrupted (Ctrl-C) while the factory made the store: no verdict on "
                      "the store")
    except (FactoryError, StoreShapeError) as exc:
        if result is None or result.outcome == "passed":
            result = _setup_error(exc, factory, done)
    except Exception as exc:  # a failure outside any clause: the harness, a teardown
        result = done("error", f"{describe_exception(exc)}", details=store_frames(exc, code_roots(factory)))
    assert result is not None
    return result, found


def _verdict(c: Clause, t: Target, done: Callable[..., ClauseResult]) -> ClauseResult:
    reported: list[str] = []
    try:
        with shrink_budget(t.profile.shrink_steps, t.profile.shrink_seconds, t.profile.shrink_steps_named):
            t.supervised(lambda: reporting_to(reported, lambda: c.run(t)))
    except stops.Interrupt:
        return _interrupted(t, done)
    except stops.StuckCall as stuck:
        # A call past its deadline once Ctrl-C came is the interruption's, not the store's.
        return _interrupted(t, done) if t.watch.interrupted else _stuck(c, t, stuck, done)
    except SetupFailure as exc:  # the run is set up wrong (an opener gave no session): said once
        return _setup_error(exc.error, t.factory or (lambda: None), done)
    except ChildDied as exc:  # before the store was opened: no verdict about it
        return _interrupted(t, done) if t.watch.interrupted else done("error", str(exc))
    except BaseException as exc:
        if t.watch.interrupted:
            # Whatever the clause saw once Ctrl-C came (a cancelled call, a child process
            # stopped by the same signal) is the interruption's doing, not the store's.
            return _interrupted(t, done)
        return _failed(c, t, exc, reported, done)
    return done("passed", " ".join(t.findings), limits=tuple(t.limits))


def _interrupted(t: Target, done: Callable[..., ClauseResult]) -> ClauseResult:
    calls = t.watch.at_interrupt
    flying = f"; in flight: {', '.join(f'{what} for {s:.1f} s' for what, s in calls)}" if calls else ""
    return done("interrupted", f"interrupted (Ctrl-C) while the clause ran: no verdict on the store{flying}")


def _stuck(c: Clause, t: Target, stuck: stops.StuckCall, done: Callable[..., ClauseResult]) -> ClauseResult:
    """A call past the deadline: a violation naming it, and the clause's end."""
    text = stuck.text()
    violation = Violation(stuck.session, text)
    details = "\n".join([f"{c.name}: 1 violation(s)", *("  " + line for line in violation.lines()),
                         f"the clause stopped there; seconds waited: {stuck.seconds:g}"])
    return done("failed", text, violations=(violation,), details=details, limits=tuple(t.limits))


def _failed(c: Clause, t: Target, exc: BaseException, reported: list[str],
            done: Callable[..., ClauseResult]) -> ClauseResult:
    failures = conformance_failures(exc)
    notes = [n for n in getattr(exc, "__notes__", []) if "reproduce_failure" not in n]
    if failures:
        violations = [v for f in failures for v in f.violations]
        diagnosis = failures[0].diagnosis
        details = "\n".join(str(f) for f in failures)
    else:
        violations = []
        diagnosis = ended_by_the_store(t, _innermost(exc)) or f"the store raised {describe_exception(_innermost(exc))}"
        details = store_frames(_innermost(exc), code_roots(t.store.raw))
    first = _first_store_error(t)
    if first is not None and first[1] not in diagnosis:
        where, error, later = first
        diagnosis = (f"the store first raised {error} in {where}; all {later} later call(s) on that "
                     f"handle failed after it (a poisoned connection or handle; then: {diagnosis})")
    extra = []
    if failures and type(exc).__name__.startswith("Flaky"):
        extra.append("the failure did not repeat when Hypothesis ran the same example again: the "
                     "store's answers depend on more than the calls made (state left by earlier calls, "
                     "a cache, or timing)")
    if stopped_shrinking_early(reported):
        extra.append(f"shrinking stopped early after {t.profile.shrink_seconds:g} s (the profile's "
                     "budget): the example shown may not be the smallest")
    if c.races:
        extra.append(RACE_NOTE.format(rounds=t.profile.race_rounds))
    details = "\n".join([details, *notes, *extra]).strip()
    story = tuple(line for n in notes for line in n.splitlines())
    return done("failed", diagnosis, violations=tuple(violations), details=details, story=story,
                remarks=tuple(extra), limits=tuple(t.limits))


def _first_store_error(t: Target) -> tuple[str, str, int] | None:
    """The store's first unexpected exception, and how many later calls failed after it,
    when those later calls follow from it: every call on the handle that raised failed
    after it (a connection an earlier error left unusable), while the same clause's
    calls fail in other ways. Unrelated failures, with calls on that handle working in
    between, are not pinned on the first error."""
    unexpected = [(where, e) for where, e in t.errors if not isinstance(e, (TypeError, ValueError))]
    if len(unexpected) < 2:
        return None
    where, first = unexpected[0]
    if all(describe_exception(e) == describe_exception(first) for _, e in unexpected[1:]):
        return None
    handle = next((h for h in t.handles() if h.first_error is first), None)
    if handle is None or not handle.after_first or any(handle.after_first):
        return None
    return where, describe_exception(first), len(handle.after_first)


def _innermost(exc: BaseException) -> BaseException:
    """The store's exception inside Hypothesis's wrappers (``FlakyFailure`` groups)."""
    while True:
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]
        elif type(exc).__module__.startswith("hypothesis") and (exc.__cause__ or exc.__context__):
            exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        else:
            return exc


def _setup_error(exc: Exception, factory: Callable[..., Any], done: Callable[..., ClauseResult]) -> ClauseResult:
    if isinstance(exc, FactoryError):
        cause = exc.error
        if isinstance(cause, stops.StuckCall):
            text = cause.text(f" while {exc.stage}")
            return done("error", text, details=text, setup=True)
        return done("error", f"the {exc.label} raised {describe_exception(cause)} while {exc.stage}",
                    details=store_frames(cause, code_roots(factory)), setup=True)
    return done("error", str(exc), setup=True)


def unsupplied(factories: Iterable[Callable[..., Any] | None], given: Mapping[str, Any]) -> list[str]:
    """The factories' parameters that neither ``given`` nor :func:`check` itself
    (``tmp_path``, the throwaway-database URLs) supplies."""
    names = [n for f in factories if f is not None for n in parameter_names(f) if n != "primary"]
    return [n for n in dict.fromkeys(names) if n not in given and n not in SUPPLIED]


class _Supplier:
    """Values for the factories' parameters: the caller's, else a new ``tmp_path`` per
    clause and throwaway databases kept for the whole run."""

    def __init__(self, given: Mapping[str, Any] | Callable[[str], Any] | None,
                 factories: list[Callable[..., Any]]) -> None:
        self.given = given
        self.names = [n for f in factories for n in parameter_names(f) if n != "primary"]
        self.stack = contextlib.ExitStack()
        self.databases: dict[str, str] = {}
        self.redis_prefix = new_prefix()
        self.scratch = scratch_directory() if "tmp_path" in self.names else None
        if not callable(given):
            missing = unsupplied(factories, given or {})
            if missing:
                raise TypeError(
                    f"the factory's parameter {missing[0]!r} is not something check() can supply "
                    f"(it supplies {', '.join(SUPPLIED)}); pass "
                    f"fixtures={{{missing[0]!r}: ...}}"
                )

    def __enter__(self) -> _Supplier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    @contextlib.contextmanager
    def values(self) -> Iterator[dict[str, Any]]:
        if callable(self.given):
            yield {n: self.given(n) for n in self.names}
            return
        out: dict[str, Any] = {}
        with contextlib.ExitStack() as per_clause:
            for n in self.names:
                if self.given is not None and n in self.given:
                    out[n] = self.given[n]
                elif n == "tmp_path":
                    out[n] = Path(per_clause.enter_context(
                        tempfile.TemporaryDirectory(prefix="storetest-", dir=self.scratch)))
                elif n == _REDIS_PREFIX:
                    out[n] = self.redis_prefix
                else:
                    out[n] = self._database(_DATABASE_FIXTURES[n])
            yield out

    def _database(self, backend: str) -> str:
        if backend not in self.databases:
            from storetest import databases

            if backend in ("redis", "redis-cluster"):
                kind: Literal["redis", "redis-cluster"] = "redis" if backend == "redis" else "redis-cluster"
                target = databases.throwaway(kind, prefix=self.redis_prefix)
                self.databases[backend] = self.stack.enter_context(target).url
            else:
                self.databases[backend] = self.stack.enter_context(databases.throwaway(backend))
        return self.databases[backend]
