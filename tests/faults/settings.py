"""What every fault test shares: how many faults, the seed, and the report."""

from __future__ import annotations

import json
import os
import secrets
import sys
from typing import Any

KILLS = int(os.environ.get("STORETEST_FAULT_KILLS", "120"))
CONNECTION_KILLS = int(os.environ.get("STORETEST_FAULT_CONNECTION_KILLS", "100"))
SEED = int(os.environ.get("STORETEST_FAULT_SEED", secrets.randbelow(2**32)))

# A quarter of the connection kills cut after COMMIT; the rest kill server-side.
CUT_SHARE = 0.25

_ZERO = (
    "torn",
    "lost",
    "duplicated",
    "unexpected",
    "reordered",
    "failed saves that changed something",
    "failed log batches that landed",
    "handles failing after the last restart",
    "OutcomeUnknown not where a sent write lost its reply",
    "failures not explained by a cut",
    "failures not explained by a kill or a stall",
    "errors not a StoreError naming operation, session and cause",
)


def table(rows: list[dict[str, Any]]) -> str:
    """``rows`` (dicts with the same keys) as a Markdown table."""
    head = list(rows[0])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(r[k]) for k in head) + " |" for r in rows]
    return "\n".join(lines)


def report(name: str, figures: dict[str, Any]) -> None:
    """Print the figures (a restart or stall table first) and fail on any that must be 0."""
    figures = {"run": name, "seed": SEED, **figures}
    for key in ("restarts", "stalls"):
        if figures.get(key):
            sys.stdout.write(f"\n{name}: {key}\n\n{table(figures[key])}\n\n")
    text = json.dumps(figures, indent=1, default=str)
    sys.stdout.write(f"{text}\n")
    target = os.environ.get("STORETEST_FAULT_FIGURES")
    if target:
        with open(target, "a") as out:
            out.write(json.dumps(figures, default=str) + "\n")
    bad = {k: figures[k] for k in _ZERO if figures.get(k)}
    problems = figures["problems"][:10]
    assert not bad and not problems, f"{name} (seed {SEED}): {bad}; first problems: {problems}"
