"""The agent loop, with a store in it: what the seed's ``Runner.Run`` does with a session.

Before every model request the loop collects the steers waiting in the store and puts
them where the run has got to (not at the end of the conversation, where a steer would
be re-read as a fresh instruction on every turn), then saves the transcript. It saves
once more when the model stops asking for tools, because the model's last reply only
appears in the next request: a save per request alone would never write the answer.

A run that dies mid-step therefore resumes from the last save and redoes the step it
was in, tool calls included (a tool with a side effect can run twice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from storetest import Message, SyncStore, ToolCall, ToolResult

from .model import Model

Tool = Callable[[str], str]


@dataclass
class Run:
    """What one run did."""

    transcript: list[Message]
    #: Model requests made.
    steps: int = 0
    #: Times the transcript was saved.
    saves: int = 0
    #: Positions in ``transcript`` of the steers this run collected from the store.
    steered: list[int] = field(default_factory=list)


def run(
    store: SyncStore,
    session: str,
    messages: Sequence[Message],
    model: Model,
    tools: Mapping[str, Tool],
    max_steps: int = 8,
) -> Run:
    """Run the model on ``messages`` until it answers without calling a tool (or
    ``max_steps`` requests), keeping the session's transcript and steers in ``store``."""
    result = Run(list(messages))
    transcript = result.transcript
    while result.steps < max_steps:
        # Immediately before the request: whatever is waiting lands here, where the run is.
        for text in store.take_steers(session):
            result.steered.append(len(transcript))
            transcript.append(Message.text("user", text))
        store.save(session, transcript)
        result.saves += 1
        reply = model.reply(tuple(transcript))
        result.steps += 1
        transcript.append(reply)
        calls = [part for part in reply.content if isinstance(part, ToolCall)]
        if not calls:
            break
        for call in calls:
            transcript.append(Message("tool", (ToolResult(call.id, tools[call.name](call.arguments)),)))
    store.save(session, transcript)
    result.saves += 1
    return result
