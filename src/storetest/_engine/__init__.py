"""The engine: everything a clause runs on, private to storetest (names may change).

- ``harness``: the store under test behind one async interface (plain or async stores,
  factories, replicas); ``stops``: deadlines and Ctrl-C; ``races``: start calls at once;
- ``backends`` and ``crashing``: fresh backends, child processes, processes to kill;
- ``servers``: throwaway PostgreSQL, MySQL/MariaDB, Redis and MongoDB servers;
- ``strategies``: the generated inputs; ``profiles``: how hard a run tries;
- ``failures``, ``diagnosis``, ``item_diagnosis``: what a clause reports, and the line
  that names the kind of damage; ``item_protocol``: the values of one item protocol.

docs/architecture.md draws how a check flows through these.
"""
