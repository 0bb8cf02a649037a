"""The checkpointer binding's one line on LangGraph's AsyncSqliteSaver and
AsyncPostgresSaver, with the clauses their known defects fail skipped (each has a repro
in tests/ecosystem/repros/langgraph/): what is left must pass on every seed. Not part of
the test command (the Postgres saver takes about 20 s); for the false-alarm count:

    python scripts/false_alarms.py tests/langgraph_databases.py
"""

from storetest import run_conformance
from tests.checkpointers import postgres_checkpointer, sqlite_checkpointer
from tests.ecosystem.langgraph import DEFECTS

_SQLITE = {d.clause: f"a known defect: {d.repro}" for d in DEFECTS if d.contender.startswith("AsyncSqliteSaver")}
_POSTGRES = {d.clause: f"a known defect: {d.repro}" for d in DEFECTS if d.contender.startswith("AsyncPostgresSaver")}

run_conformance(sqlite_checkpointer, name="AsyncSqliteSaver", skip=_SQLITE)
run_conformance(postgres_checkpointer, name="AsyncPostgresSaver", skip=_POSTGRES)
