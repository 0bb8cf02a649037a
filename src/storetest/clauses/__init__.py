"""The clauses of the contract, one function each, grouped by topic:

- :mod:`~storetest.clauses.content`: what goes in comes out (round trips, raw JSON,
  large values, bad input);
- :mod:`~storetest.clauses.transcripts`: saves replace, long histories, unknown
  sessions, isolation, aliasing, concurrent saves;
- :mod:`~storetest.clauses.steers`: order, exactly once, races, independence;
- :mod:`~storetest.clauses.replicas`: two handles on one backend;
- :mod:`~storetest.clauses.model`: a state machine against a plain model;
- :mod:`~storetest.clauses.logs`: entry logs (the ``log`` capability): exact entries,
  append order, refused batches, isolation, replicas;
- :mod:`~storetest.clauses.log_races`: concurrent appends, atomic batches, creates;
- :mod:`~storetest.clauses.log_operations`: fork and compaction;
- :mod:`~storetest.clauses.log_model`: the entry-log state machine;
- :mod:`~storetest.clauses.items`: item histories (the ``items`` capability, an agent
  SDK's session): exact items, order, limits, pop, clear, isolation, replicas;
- :mod:`~storetest.clauses.item_races`: pops, clears and batches racing;
- :mod:`~storetest.clauses.item_model`: the item-history state machine;
- :mod:`~storetest.clauses.adk`: Google ADK session services (the ``adk`` capability):
  exclusive create, verbatim events, scoped state, isolation, replicas;
- :mod:`~storetest.clauses.checkpoints`: LangGraph checkpointers (the ``checkpoints``
  capability): exact round trips, ``list``, isolation, parents, pending writes, deletes;
- :mod:`~storetest.clauses.checkpoint_races`: parallel writes, two handles, a delete
  racing a put, first calls on a fresh backend, writes from processes;
- :mod:`~storetest.clauses.checkpoint_model`: the checkpointer state machine;
- :mod:`~storetest.clauses.checkpoint_optional`: a checkpointer's optional ``copy_thread``,
  ``prune`` and ``delete_for_runs``, where it claims them;
- :mod:`~storetest.clauses.deletes`: whole-session stores that delete (the ``deletes``
  capability, an Agent Framework ``SessionStore``): a delete alone and racing a save;
- :mod:`~storetest.clauses.llama_index`: LlamaIndex chat stores (the ``llama_index``
  capability): delete by index, the keys listed, set_messages, an AsyncDBChatStore's queue;
- :mod:`~storetest.clauses.input_model`: the input model's sizes, characters and id
  relations for entry logs, item and chat histories and ADK services;
- :mod:`~storetest.clauses.idle`: data kept over an idle time (opt-in);
- :mod:`~storetest.clauses.crash`: a writing process killed, the data reopened (opt-in, ``reopen=``).

A clause takes a ``Target`` (the store, maybe a replica, the event loop, profile and
seed) and raises :class:`~storetest._engine.failures.ConformanceFailure` listing every
violation it saw. Its docstring's first paragraph is what it promises; the rest names
the real bugs it exists for. :data:`CLAUSES` lists them in the order they run.
"""

import importlib

from storetest.clauses._registry import CLAUSES, Clause, clause, clause_named

#: The topic modules, in the order their clauses run; importing one registers its clauses.
TOPICS = (
    "content", "transcripts", "steers", "replicas", "model",
    "logs", "log_races", "log_operations", "log_model",
    "items", "item_races", "item_model", "adk", "checkpoints", "checkpoint_races", "checkpoint_model",
    "checkpoint_optional", "deletes",
    "llama_index", "input_model", "idle", "crash",
)
for _topic in TOPICS:
    importlib.import_module(f"{__name__}.{_topic}")

__all__ = ["CLAUSES", "TOPICS", "Clause", "clause", "clause_named"]
