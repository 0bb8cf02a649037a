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
    "errors not a StoreError naming operation, session and cause",
)


def report(name: str, figures: dict[str, Any]) -> None:
    figures = {"run": name, "seed": SEED, **figures}
    text = json.dumps(figures, indent=1, default=str)
    sys.stdout.write(f"{text}\n")
    target = os.environ.get("STORETEST_FAULT_FIGURES")
    if target:
        with open(target, "a") as out:
            out.write(json.dumps(figures, default=str) + "\n")
    bad = {k: figures[k] for k in _ZERO if figures.get(k)}
    problems = figures["problems"][:10]
    assert not bad and not problems, f"{name} (seed {SEED}): {bad}; first problems: {problems}"
