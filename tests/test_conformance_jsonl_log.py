"""The JSONL log store against the whole conformance suite, on real files: the replica
is a second store on the same directory."""

from reference_stores.jsonl_log import JsonlLogStore
from storetest import run_conformance


def jsonl_log(tmp_path):
    return JsonlLogStore(tmp_path / "sessions")


def replica(primary):
    return JsonlLogStore(primary.directory)


# The crash clauses reopen the same directory with the factory itself.
run_conformance(jsonl_log, replica=replica, name="jsonl-log", reopen=jsonl_log)
