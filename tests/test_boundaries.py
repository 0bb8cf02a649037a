"""The import boundary: the core and the plugin load no database driver, the contract
loads neither pytest nor Hypothesis, and each reference store loads only its own driver."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("pytest", "hypothesis", "asyncpg", "pymysql", "pymongo", "bson", "mongomock",
         "testcontainers", "docker", "sqlite3", "redis")


def loaded_after(statement: str) -> set[str]:
    code = (
        f"import sys, json\n{statement}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    ("statement", "allowed"),
    [
        ("import storetest", set()),
        ("from storetest import Message, Store, open_session, encode_message", set()),
        ("import storetest.contract, storetest.codec", set()),
        ("import storetest.plugin", {"pytest", "hypothesis"}),
        ("import storetest.databases", set()),
        ("from storetest import run_conformance", {"pytest", "hypothesis"}),
        ("import reference_stores.memory", set()),
        ("import reference_stores.sqlite", {"sqlite3"}),
        ("import reference_stores.postgres", {"asyncpg"}),
        ("import reference_stores.mysql", {"pymysql"}),
        ("import reference_stores.mongodb", {"pymongo", "bson"}),
    ],
)
def test_imports_load_only_what_they_need(statement: str, allowed: set[str]) -> None:
    extra = loaded_after(statement) - allowed
    assert not extra, f"{statement!r} loaded {sorted(extra)}"
