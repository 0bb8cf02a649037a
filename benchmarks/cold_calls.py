"""The pieces of the SQLite store's common save, each timed cold (the CPU's caches
flushed before every call, as an agent's save runs between its other work), beside the
form each had before it was cut, interleaved call by call.

    python benchmarks/cold_calls.py
    python benchmarks/cold_calls.py --calls 2000

A save at turn 2,000 costs about 30 us of Python over its one INSERT and fsync
(``benchmarks/floor_rounds.py``), so a call that is a fraction of a microsecond run hot
may be worth several cold: each pair here shows what one cut is worth, which the whole
save's benchmarks (``floor_ab.py``) can see only as a sum. Each line: the median of
each form in microseconds and the median of the per-call differences.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from common import load_average
from peers import _conversation

from reference_stores._incremental import DIGEST_SIZE, chain_digest, row_text
from storetest.codec import encode_message
from storetest.contract import (
    MAX_SESSION_ID_BYTES,
    Message,
    Text,
    ToolCall,
    ToolResult,
    _check_encodable,
    _check_size,
    check_session_id,
)

#: Written over before every timed call: larger than these machines' last-level caches.
_FLUSH = bytearray(32 * 1024 * 1024)


def flush_caches() -> None:
    _FLUSH[::64] = b"\x01" * (len(_FLUSH) // 64)


def session_id_checked_by_helpers(session: object) -> str:
    """``check_session_id`` before its one-line path for short ASCII ids."""
    if not isinstance(session, str):
        raise TypeError(f"session must be str, not {type(session).__name__}")
    if not session:
        raise ValueError("session must not be empty")
    _check_encodable("session", session)
    _check_size("session", session, MAX_SESSION_ID_BYTES)
    return session


def chain_digest_by_new_hasher(previous: bytes | bytearray, body: str) -> bytes:
    """``chain_digest`` before it copied an empty hasher."""
    return hashlib.blake2b(previous + body.encode("utf-8"), digest_size=DIGEST_SIZE).digest()


def row_text_with_cast(message: Message) -> str:
    """``row_text`` before it dropped ``typing.cast``."""
    content = message.content
    if len(content) == 1:
        part = content[0]
        kind = type(part)
        if kind is Text:
            return message.role + ":" + part.text  # type: ignore[union-attr]
        if kind is ToolCall:
            call = cast(ToolCall, part)
            return f"{{!{message.role}:{len(call.id)}:{len(call.name)}:{call.id}{call.name}{call.arguments}"
        if kind is ToolResult:
            result = cast(ToolResult, part)
            return f"{{?{message.role}:{len(result.call_id)}:{int(result.is_error)}:{result.call_id}{result.content}"
    return encode_message(message)


def cold(call: Callable[..., Any], *args: Any) -> float:
    """Microseconds one call takes right after the caches were flushed."""
    flush_caches()
    start = time.perf_counter_ns()
    call(*args)
    return (time.perf_counter_ns() - start) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=600, help="calls of each form (default 600)")
    args = parser.parse_args(argv)
    messages = _conversation("agent", 200)
    tool_calls = [m for m in messages if len(m.content) == 1 and type(m.content[0]) is ToolCall]
    tool_results = [m for m in messages if len(m.content) == 1 and type(m.content[0]) is ToolResult]
    previous = bytearray(b"\x01" * DIGEST_SIZE)  # a remembered digest is a bytearray slice
    texts = [row_text(m) for m in messages]
    # (what, inputs, the form now, the form before); every check of sameness runs first.
    pairs: list[tuple[str, list[tuple[Any, ...]], Callable[..., Any], Callable[..., Any]]] = [
        ("check_session_id, a short ASCII id", [("floor",), ("session-0042",)],
         check_session_id, session_id_checked_by_helpers),
        ("chain_digest of a row text", [(previous, t) for t in texts], chain_digest, chain_digest_by_new_hasher),
        ("row_text of a tool call", [(m,) for m in tool_calls], row_text, row_text_with_cast),
        ("row_text of a tool result", [(m,) for m in tool_results], row_text, row_text_with_cast),
    ]
    for what, inputs, now, before in pairs:
        for given in inputs:
            if now(*given) != before(*given):
                raise SystemExit(f"{what}: the two forms differ on {given!r}")
    print(f"Each form {args.calls} calls, caches flushed before each, the two forms alternating. {load_average()}.")
    print("\n| call | now (us) | before (us) | now - before, median per call (us) |")
    print("|---|---|---|---|")
    for what, inputs, now, before in pairs:
        times: dict[str, list[float]] = {"now": [], "before": []}
        for i in range(args.calls):
            given = inputs[i % len(inputs)]
            for key, form in (("now", now), ("before", before))[:: 1 if i % 2 else -1]:
                times[key].append(cold(form, *given))
        gap = statistics.median(a - b for a, b in zip(times["now"], times["before"], strict=True))
        print(f"| {what} | {statistics.median(times['now']):.2f} | {statistics.median(times['before']):.2f} | "
              f"{gap:+.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
