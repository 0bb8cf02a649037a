"""examples/sessions tells the seed's story, with each replica in its own process, and
its agent loop collects steers and saves where the seed says it does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from examples.sessions import agent
from examples.sessions.__main__ import FOLLOW_UP, QUESTION, SESSION, STEER
from examples.sessions.model import FILES, TOOLS, PrefillRefused, ScriptedModel
from reference_stores.sqlite import SQLiteStore
from storetest import Message, ToolResult

ROOT = Path(__file__).resolve().parent.parent

STORY = [
    "replica B   (process N) left a steer in sessions.db, holding no run — there was none yet",
    "replica A   (process N) ran 2 steps and was never told replica B existed",
    "transcript  5 messages, and the steer is message 1 of them",
    "replica C   (process N) resumed from 5 messages another process saved, and answered",
    '            "line 8 of lease.go: `return nil, ErrTokenExpired`, reached only while the lease is still valid."',
    "steers      0 left in the store: the steer reached the model exactly once",
]
#: The replicas run alone, out of the order docs/index.md tells: each line still says what happened.
OUT_OF_ORDER = {
    "cab": [
        "replica C   (process N) found no conversation to resume: nobody has started it yet",
        "replica A   (process N) ran 2 steps and was never told replica B existed",
        "transcript  4 messages, and no steer reached it",
        "replica B   (process N) left a steer in sessions.db, holding no run — a run had already saved 4 messages",
    ],
    "acb": [
        "replica A   (process N) ran 2 steps and was never told replica B existed",
        "transcript  4 messages, and no steer reached it",
        "replica C   (process N) resumed from 4 messages another process saved, and answered",
        '            "no line of token.go returns the token error."',  # without the steer, the wrong file
        "steers      0 left in the store: no steer reached the model",
        "replica B   (process N) left a steer in sessions.db, holding no run — a run had already saved 6 messages",
    ],
    "bca": [
        "replica B   (process N) left a steer in sessions.db, holding no run — there was none yet",
        "replica C   (process N) found no conversation to resume: nobody has started it yet",
        "replica A   (process N) ran 2 steps and was never told replica B existed",
        "transcript  5 messages, and the steer is message 1 of them",
    ],
}
PROCESS = re.compile(r"\(process (\d+)\)")


def _story(lines: list[str]) -> tuple[list[str], set[str]]:
    """The lines with each process id replaced by N, and the ids."""
    return [PROCESS.sub("(process N)", line) for line in lines], set(PROCESS.findall("\n".join(lines)))


def _python(*args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run([sys.executable, "-m", "examples.sessions", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, encoding="utf-8", check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_three_replicas_in_three_processes_tell_the_whole_story(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    lines, processes = _story([line for name in "bac" for line in _python("replica", name, "--db", str(db))])
    assert lines == STORY and len(processes) == 3


def test_the_one_command_tells_the_same_story_from_three_processes() -> None:
    lines, processes = _story(_python())
    assert lines == STORY
    assert len(processes) == 3 and str(os.getpid()) not in processes


@pytest.mark.parametrize("order", sorted(OUT_OF_ORDER))
def test_replicas_run_alone_in_any_order_say_what_happened(tmp_path: Path, order: str) -> None:
    db = tmp_path / "sessions.db"
    lines, _ = _story([line for name in order for line in _python("replica", name, "--db", str(db))])
    assert lines == OUT_OF_ORDER[order]


class _Recording:
    """The scripted model, recording each request and what the store held when it came."""

    def __init__(self, reader: SQLiteStore) -> None:
        self.reader = reader
        self.requests: list[tuple[Message, ...]] = []
        self.stored: list[list[Message]] = []

    def reply(self, messages: Sequence[Message]) -> Message:
        self.requests.append(tuple(messages))
        self.stored.append(self.reader.messages(SESSION))
        return ScriptedModel().reply(messages)


def test_a_steer_left_mid_run_lands_where_the_run_had_got_to(tmp_path: Path) -> None:
    """A steer left (through another handle) while the tool runs goes into the very next
    request, right after the tool result, not at the end of the conversation."""
    with SQLiteStore(tmp_path / "s.db") as store, SQLiteStore(tmp_path / "s.db") as other:
        left: list[str] = []

        def read_and_get_steered(arguments: str) -> str:
            if not left:  # somebody steers while the first tool runs
                other.add_steer(SESSION, STEER)
                left.append(STEER)
            return TOOLS["read_file"](arguments)

        model = _Recording(other)
        done = agent.run(store, SESSION, [Message.text("user", QUESTION)], model,
                         {"read_file": read_and_get_steered})
    assert done.steps == 3
    assert done.steered == [3]
    second = model.requests[1]
    assert second[-1] == Message.text("user", STEER)
    assert isinstance(second[-2].content[0], ToolResult)
    assert done.transcript[-1].role == "assistant"
    assert done.transcript.index(Message.text("user", STEER)) == 3 < len(done.transcript) - 1


def test_the_transcript_is_saved_before_every_request_and_once_at_the_end(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store, SQLiteStore(tmp_path / "s.db") as other:
        model = _Recording(other)
        done = agent.run(store, SESSION, [Message.text("user", QUESTION)], model, TOOLS)
        final = other.messages(SESSION)
    assert done.steps == 2 and done.saves == 3
    assert [tuple(s) for s in model.stored] == model.requests
    assert final == done.transcript and final[-1].role == "assistant"


def test_without_the_steer_the_model_looks_in_the_wrong_place(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        done = agent.run(store, SESSION, [Message.text("user", QUESTION)], ScriptedModel(), TOOLS)
    assert "lease" not in done.transcript[-1].content[0].text  # type: ignore[union-attr]
    assert done.transcript[2].content[0] == ToolResult("call_1", FILES["token.go"])


def test_resuming_without_the_new_user_message_is_refused_as_prefill(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        store.add_steer(SESSION, STEER)
        agent.run(store, SESSION, [Message.text("user", QUESTION)], ScriptedModel(), TOOLS)
        resumed = store.messages(SESSION)
        with pytest.raises(PrefillRefused, match="must end with a user message"):
            agent.run(store, SESSION, resumed, ScriptedModel(), TOOLS)
        answered = agent.run(store, SESSION, [*resumed, Message.text("user", FOLLOW_UP)], ScriptedModel(), TOOLS)
    assert "line 8 of lease.go" in answered.transcript[-1].content[0].text  # type: ignore[union-attr]
