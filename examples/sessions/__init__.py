"""Three replicas over one SQLite file and nothing else: no channel, no mutex, no run handle.

The first seed's example, in Python. Replica B leaves a steer while no run exists;
replica A, never told B exists, runs two model steps, collecting waiting steers
immediately before every model request; replica C, which never ran a turn, resumes
from the stored transcript, appends the new user message the model needs, and answers.
A scripted model (:mod:`examples.sessions.model`) stands in for the LLM.

    python -m examples.sessions                          # B, A and C as three processes
    python -m examples.sessions replica b --db FILE      # one replica, one process

The only thing the replicas share is the file, through
``reference_stores.sqlite.SQLiteStore``.
"""
