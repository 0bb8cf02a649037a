from reference_stores.memory_log import MemoryLogStore
from storetest import run_conformance

run_conformance(MemoryLogStore, replica=lambda primary: primary.replica(), name="memory-log")
