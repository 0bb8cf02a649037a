"""Reference stores that pass the storetest suite, one module per backend.

Each module imports only its own driver: ``memory`` and ``sqlite`` need nothing beyond
the standard library; ``postgres`` needs asyncpg, ``mysql`` pymysql, ``mongodb`` pymongo.
Import the module you use, e.g. ``from reference_stores.sqlite import SQLiteStore``.

``durable`` is no store: it runs an agent's session (branch, fork, compact) over any
entry-log store here, and imports nothing beyond the standard library and storetest's
contract.
"""
