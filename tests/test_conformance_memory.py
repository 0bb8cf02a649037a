"""The suite against the in-memory reference store (two handles on one backend are replicas)."""

from reference_stores.memory import MemoryStore
from storetest import run_conformance

run_conformance(MemoryStore, replica=lambda primary: primary.replica(), name="memory")
