"""Minimal repros of the defects found in Google ADK's session services, each through
ADK's own public API (``tests/ecosystem/adk.py`` lists them)."""
