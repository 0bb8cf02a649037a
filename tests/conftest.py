"""The suite's own checks on itself: every test gives back the process-wide state it
changes (tests/process_state.py)."""

pytest_plugins = ["tests.process_state"]
