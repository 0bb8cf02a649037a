"""Stores from other projects, judged through their own public APIs.

One module per agent SDK (``openai_agents.py``, ``langchain.py``, ``adk.py``), each
listing its ``CONTENDERS`` and the ``DEFECTS`` found in them; ``repros/<sdk>/`` holds
one script per defect; ``scripts/ecosystem_table.py`` runs the suite on every
contender and writes ``docs/ecosystem.md``. The shared shapes are in ``common.py``.
"""
