"""Examples that run from a clone of the repository (``python -m examples.sessions``)."""
