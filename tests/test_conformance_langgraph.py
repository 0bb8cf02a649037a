"""The checkpointer binding's one line on LangGraph's own InMemorySaver: it passes every
checkpoint clause (0 false alarms in 20 seeds: python scripts/false_alarms.py
tests/test_conformance_langgraph.py)."""

from storetest import run_conformance
from tests.checkpointers import memory_checkpointer
from tests.ecosystem.langgraph import IN_ONE_PROCESS

run_conformance(memory_checkpointer, name="InMemorySaver", skip=IN_ONE_PROCESS)
