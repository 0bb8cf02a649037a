"""The checkpointer binding's one line on LangGraph's own InMemorySaver: it passes every
checkpoint clause but the process one, which does not apply to it (0 false alarms in 20
seeds: python scripts/checkpointer_seeds.py --saver memory)."""

from storetest import run_conformance
from tests.checkpointers import memory_checkpointer
from tests.ecosystem.langgraph import IN_ONE_PROCESS

run_conformance(memory_checkpointer, name="InMemorySaver", skip=IN_ONE_PROCESS)
