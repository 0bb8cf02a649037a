"""Run chosen clauses against the SDK stores of ``tests/ecosystem`` (those
``docs/ecosystem.md`` judges) on many seeds, and print each store's verdicts per clause:
how many seeds failed (and how the others ended: passed, or not claimed, so a clause
the store never ran is not read as passed), and each failure's first line, so a changed clause's new
verdicts (a false alarm, or a real defect needing its repro) show before the table is
regenerated.

    python scripts/sdk_seeds.py --clause clear_racing_add_lands_before_or_after --seeds 20
    python scripts/sdk_seeds.py --sdk adk --clause adk_get_session_options_select_events
    python scripts/sdk_seeds.py --reference --clause pop_item_hands_each_item_out_once

``--reference`` runs the correct stores of the conformance files instead (items in memory
and on SQLite, the memory ADK service, the SQLite chat history sync and async), in this
process: their failures are false alarms (the in-process form of scripts/false_alarms.py).

Each failure's clause is compared with the contender's listed defects: a failure with no
defect listed for its clause is marked NEW. A factory that raised (an SDK package not
installed here) is marked NOT RUN, not counted as any clause's failure. Exit 1 when
either is.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The SDK modules of tests/ecosystem (as scripts/ecosystem_table.py lists them).
SDKS = ("openai_agents", "langchain", "adk", "langgraph", "agent_framework", "llama_index")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clause", action="append", required=True)
    parser.add_argument("--sdk", action="append", choices=SDKS, help="default: every SDK")
    parser.add_argument("--only", action="append", default=[], metavar="SUBSTRING", help="contenders whose name has it")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=1)
    parser.add_argument("--reference", action="store_true", help="the conformance files' correct stores")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from storetest import check
    from tests.broken_stores import fixtures_outside_pytest

    new = False
    with fixtures_outside_pytest() as fixture:
        for sdk in ["reference"] if args.reference else args.sdk or SDKS:
            module = _reference() if sdk == "reference" else importlib.import_module(f"tests.ecosystem.{sdk}")
            listed = {(d.contender, d.clause) for d in module.DEFECTS}
            for contender in module.CONTENDERS:
                if contender.binding is None or (args.only and not any(o in contender.name for o in args.only)):
                    continue
                clauses = [c for c in args.clause if not contender.clauses or c in contender.clauses]
                failed: dict[str, list[str]] = {c: [] for c in clauses}
                outcomes: dict[str, Counter[str]] = {c: Counter() for c in clauses}
                factory: list[str] = []  # seeds where the factory raised: no clause ran
                began = time.perf_counter()
                for seed in range(args.seed_base, args.seed_base + args.seeds):
                    binding = contender.binding()
                    report = check(binding, seed=seed, name=contender.name, clauses=clauses,
                                   skip=dict(contender.skip), fixtures=fixture,
                                   reopen=binding if getattr(contender, "reopen", False) else None)
                    for r in report.results:
                        if r.setup and r.outcome == "error":
                            factory.append(f"seed {seed}: " + (r.diagnosis or r.details).partition("\n")[0][:300])
                            continue
                        outcomes[r.clause][r.outcome] += 1
                        if r.outcome in ("failed", "error"):
                            failed[r.clause].append(f"seed {seed}: {r.outcome}: "
                                                    + (r.diagnosis or r.details or "").partition("\n")[0][:300])
                if factory:
                    new = True
                    print(f"{sdk}: {contender.name:44} the factory raised on {len(factory)}/{args.seeds} seeds  "
                          f"NOT RUN (the clauses ran on the other seeds only)", flush=True)
                    for line in factory[:3]:
                        print(f"    {line}", flush=True)
                for clause, failures in failed.items():
                    outcomes[clause]["not run"] = args.seeds - len(failures) - sum(
                        n for o, n in outcomes[clause].items() if o not in ("failed", "error"))
                    mark = "" if not failures or (contender.name, clause) in listed else "  NEW"
                    new |= bool(mark)
                    others = ", ".join(f"{n} {o}" for o, n in sorted(outcomes[clause].items())
                                       if n and o not in ("failed", "error"))
                    print(f"{sdk}: {contender.name:44} {clause:46} {len(failures)}/{args.seeds} failed{mark}"
                          f"  ({others or 'no other outcome'}; {time.perf_counter() - began:.0f} s)", flush=True)
                    for line in failures[:3]:
                        print(f"    {line}", flush=True)
    return 1 if new else 0


def _reference() -> object:
    """The conformance files' correct stores, as contenders with no defects."""
    import types

    from storetest import item_sessions
    from tests.adk_services import memory_adk
    from tests.chat_histories import async_sqlite_chat, sqlite_chat
    from tests.ecosystem.common import Contender
    from tests.item_histories import memory_sessions, sqlite_sessions

    stores = {"memory-items": lambda: item_sessions(memory_sessions), "sqlite-items": lambda: item_sessions(
        sqlite_sessions), "memory-adk": lambda: memory_adk, "sqlite-chat": lambda: sqlite_chat,
        "async-sqlite-chat": lambda: async_sqlite_chat}
    return types.SimpleNamespace(DEFECTS=(), CONTENDERS=[Contender(name, "storetest", binding) for name, binding
                                                         in stores.items()])


if __name__ == "__main__":
    sys.exit(main())
