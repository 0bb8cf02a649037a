"""Microsoft Agent Framework's history providers and session stores (agent-framework-core),
judged through their own public API.

Each binding is one line for the author (``history_providers(outer factory)``,
``session_stores(outer factory)``) over an outer factory defined at the top level of
this module (child processes import it by name); nothing here imports the framework at
import time. ``RedisHistoryProvider`` (agent-framework-redis) is listed, not run: see its note.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from storetest import history_providers, session_stores
from tests.ecosystem.common import Contender, Defect

PROJECT = "agent-framework-core"
TITLE = "Microsoft Agent Framework (`agent-framework-core`)"
#: The import names the providers need (tests/ecosystem/test_repros.py skips or fails without them).
REQUIRES = ("agent_framework",)
#: What installs every contender's dependencies.
INSTALL = "pip install -e '.[agent-framework]'"
#: The distributions whose versions the table records.
DISTRIBUTIONS = ("agent-framework-core", "msgspec", "pydantic")

_SHARED: dict[str, Any] = {}


def in_memory_history(tmp_path: Path) -> Any:
    """One ``InMemoryHistoryProvider`` per directory: it keeps the history in the state
    the binding passes, one dict per provider and session, so both handles share it."""
    from agent_framework import InMemoryHistoryProvider

    return _SHARED.setdefault(f"history:{tmp_path}", InMemoryHistoryProvider())


def file_history(tmp_path: Path) -> Any:
    from agent_framework import FileHistoryProvider

    with warnings.catch_warnings():  # marked experimental
        warnings.simplefilter("ignore")
        return FileHistoryProvider(tmp_path / "history")


def in_memory_sessions(tmp_path: Path) -> Any:
    """One ``SessionStore`` per directory: its backend is this process's memory."""
    from agent_framework import SessionStore

    with warnings.catch_warnings():  # marked experimental
        warnings.simplefilter("ignore")
        return _SHARED.setdefault(f"sessions:{tmp_path}", SessionStore())


def file_sessions(tmp_path: Path) -> Any:
    from agent_framework import FileSessionStore

    with warnings.catch_warnings():  # marked experimental
        warnings.simplefilter("ignore")
        return FileSessionStore(tmp_path / "sessions")


memory_history_binding = history_providers(in_memory_history)
file_history_binding = history_providers(file_history)
memory_sessions_binding = session_stores(in_memory_sessions)
file_sessions_binding = session_stores(file_sessions)

_ONE_PROCESS = ("keeps its data in this process's memory (the state an AgentSession carries, or a dict): "
                "no other process can reach it, and a killed process takes it along")
_IN_MEMORY = {c: _ONE_PROCESS for c in ("adds_from_processes_land_whole", "items_survive_a_crash")}
_ID_LIMIT = ("FileSessionStore documents ids of at most 128 characters (MAX_SESSION_ID_LENGTH) and refuses longer "
             "ones with ValueError before writing; this clause holds ids to storetest's 512 bytes")

CONTENDERS = [
    Contender("InMemoryHistoryProvider", PROJECT, lambda: memory_history_binding, skip=_IN_MEMORY),
    Contender("FileHistoryProvider (JSON Lines)", PROJECT, lambda: file_history_binding, reopen=True),
    Contender("SessionStore (in memory)", PROJECT, lambda: memory_sessions_binding,
              skip={"saves_survive_a_crash": _ONE_PROCESS}),
    Contender("FileSessionStore (JSON)", PROJECT, lambda: file_sessions_binding,
              skip={c: _ID_LIMIT for c in ("sessions_are_isolated", "every_field_round_trips_at_every_size")},
              reopen=True),
    Contender("RedisHistoryProvider", "agent-framework-redis", None,
              not_runnable="cannot be installed beside the pins: every agent-framework-redis release since "
              "1.0.0b260319 requires redis<7.2.1 (the pins hold redis 7.4.1, which openai-agents' RedisSession "
              "and LangChain's Redis history are judged on), and 1.0.0b260311, the last without that cap, does "
              "not import with agent-framework-core 1.23.0 (BaseContextProvider is gone)"),
]

_MEMORY, _FILE = "InMemoryHistoryProvider", "FileHistoryProvider (JSON Lines)"
_REPEATS = ("save_messages drops a message repeating the last stored one (an assistant saying the same twice, two "
            "empty system messages) and a batch ending with the whole stored history (filter_new_messages)")

DEFECTS = [
    Defect(_MEMORY, "items_round_trip_exactly", _REPEATS,
           "tests/ecosystem/repros/agent_framework/in_memory_drops_repeats.py", True),
    Defect(_MEMORY, "item_history_matches_model", _REPEATS,
           "tests/ecosystem/repros/agent_framework/in_memory_drops_repeats.py", True),
    Defect(_MEMORY, "items_are_not_aliased", "keeps the caller's Message objects: changing one after "
           "save_messages changes the history (not documented either way)",
           "tests/ecosystem/repros/agent_framework/in_memory_shares_messages.py", True),
    Defect(_FILE, "items_round_trip_exactly", _REPEATS,
           "tests/ecosystem/repros/agent_framework/file_drops_repeats.py", True),
    Defect(_FILE, "item_history_matches_model", _REPEATS,
           "tests/ecosystem/repros/agent_framework/file_drops_repeats.py", True),
    Defect(_FILE, "items_survive_a_crash", "a writer dying mid-append leaves half a JSON line, and every later "
           "get_messages of the session raises ValueError ('Failed to deserialize history line')",
           "tests/ecosystem/repros/agent_framework/file_torn_line_after_crash.py", True),
]
