"""The ADK binding's one line, on a correct service (tests/adk_services.py): every ADK clause passes."""

from storetest import run_conformance
from tests.adk_services import memory_adk

run_conformance(memory_adk, name="memory-adk")
