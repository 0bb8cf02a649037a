"""Run the example: ``python -m examples.sessions`` (three processes on one file), or
one replica: ``python -m examples.sessions replica a --db FILE`` (b, a and c, in any order:
each says what it found).

Each replica gets the file's path and nothing else. The story's lines come from what
each replica actually saw in the store.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from reference_stores.sqlite import SQLiteStore
from storetest import Message, Text

from . import agent
from .model import TOOLS, ScriptedModel

#: The conversation the three replicas serve.
SESSION = "conversation-1"
QUESTION = "why does renewLease fail with a token error when the token is fine?"
#: What somebody tells the agent through replica B, holding no run.
STEER = "check the lease expiry, not the token"
#: The new message that arrives at replica C, in a thread another replica was handling.
FOLLOW_UP = "and which line returns the token error?"

ROOT = Path(__file__).resolve().parent.parent.parent


def say(label: str, text: str) -> None:
    print(f"{label:<12}{text}", flush=True)


def pid() -> str:
    """This replica's process, so the story shows three of them."""
    return f"(process {os.getpid()})"


def replica_b(db: Path) -> None:
    """Leave a steer for the conversation, holding no run."""
    with SQLiteStore(db) as store:
        before = store.messages(SESSION)
        store.add_steer(SESSION, STEER)
    when = "there was none yet" if not before else f"a run had already saved {len(before)} messages"
    say("replica B", f"{pid()} left a steer in {db.name}, holding no run — {when}")


def replica_a(db: Path) -> None:
    """Start the conversation and run it until the model answers."""
    with SQLiteStore(db) as store:
        existing = store.messages(SESSION)
        if existing:
            say("replica A", f"{pid()} found the conversation already started ({len(existing)} messages): "
                "nothing to start")
            return
        done = agent.run(store, SESSION, [Message.text("user", QUESTION)], ScriptedModel(), TOOLS)
        stored = store.messages(SESSION)
    say("replica A", f"{pid()} ran {done.steps} steps and was never told replica B existed")
    where = {0: "and no steer reached it", 1: "and the steer is message {} of them"}.get(
        len(done.steered), "and the steers are messages {} of them")
    say("transcript", f"{len(stored)} messages, " + where.format(", ".join(map(str, done.steered))))


def replica_c(db: Path) -> None:
    """Carry on a conversation this process never ran, because somebody said something new."""
    with SQLiteStore(db) as store:
        resumed = store.messages(SESSION)
        if not resumed:
            say("replica C", f"{pid()} found no conversation to resume: nobody has started it yet")
            return
        # The transcript ends with the assistant's answer: the model needs a user message last.
        done = agent.run(store, SESSION, [*resumed, Message.text("user", FOLLOW_UP)], ScriptedModel(), TOOLS)
        left = store.take_steers(SESSION)
        final = store.messages(SESSION)
    answer = " ".join(p.text for p in done.transcript[-1].content if isinstance(p, Text))
    say("replica C", f"{pid()} resumed from {len(resumed)} messages another process saved, and answered")
    say("", f'"{answer}"')
    handed = sum(m == Message.text("user", STEER) for m in final)
    times = {1: "exactly once", 2: "twice"}.get(handed, f"{handed} times")
    reached = "no steer reached the model" if not handed else f"the steer reached the model {times}"
    say("steers", f"{len(left)} left in the store: {reached}")


REPLICAS = {"b": replica_b, "a": replica_a, "c": replica_c}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.sessions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="the SQLite file the replicas share (default: a new temporary one)")
    commands = parser.add_subparsers(dest="command")
    one = commands.add_parser("replica", help="run one replica in this process")
    one.add_argument("name", choices=sorted(REPLICAS))
    one.add_argument("--db", type=Path, required=True, help="the SQLite file the replicas share")
    args = parser.parse_args(argv)
    if args.command == "replica":
        REPLICAS[args.name](args.db)
        return 0
    with tempfile.TemporaryDirectory(prefix="sessions-") as scratch:
        db = args.db or Path(scratch) / "sessions.db"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        for name in ("b", "a", "c"):
            command = [sys.executable, "-m", "examples.sessions", "replica", name, "--db", str(db)]
            if subprocess.run(command, cwd=ROOT, env=env, check=False).returncode != 0:
                print(f"replica {name.upper()} failed", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
