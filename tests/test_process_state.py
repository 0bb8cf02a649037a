"""The session check of tests/process_state.py (issue 44): a test that leaves process-wide
state changed fails the run, naming what it changed, and the state is put back for the
tests after it."""

from __future__ import annotations

import signal

import pytest

pytest_plugins = ["pytester"]


def test_a_test_that_leaves_state_changed_fails_the_run_and_the_state_is_put_back(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio, os, signal, sys

        def on_ctrl_c(signum, frame):
            pass

        def test_takes_ctrl_c():
            signal.signal(signal.SIGINT, on_ctrl_c)

        def test_sets_a_handler_for_sigterm():
            signal.signal(signal.SIGTERM, lambda *a: None)

        def test_sets_a_variable():
            os.environ["STORETEST_LEFT_BEHIND"] = "1"

        def test_moves():
            os.chdir("/")

        def test_switches_faster():
            sys.setswitchinterval(0.001)

        def test_sets_a_policy():
            asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())

        def test_gives_everything_back(monkeypatch):
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGINT, previous)
            monkeypatch.setenv("STORETEST_LEFT_BEHIND", "1")
            monkeypatch.chdir("/")
        """
    )
    before = signal.getsignal(signal.SIGINT)
    result = pytester.runpytest("-p", "tests.process_state")
    result.assert_outcomes(passed=7, errors=6)
    result.stdout.fnmatch_lines([
        "*ERROR at teardown of test_takes_ctrl_c*",
        "*left process-wide state changed*: the SIGINT handler: * before, <function on_ctrl_c at *> after",
        "*ERROR at teardown of test_sets_a_handler_for_sigterm*",
        "*: the SIGTERM handler: *",
        "*ERROR at teardown of test_sets_a_variable*",
        "*: the environment variables: STORETEST_LEFT_BEHIND changed",
        "*ERROR at teardown of test_moves*",
        "*: the working directory: * before, '/' after",
        "*ERROR at teardown of test_switches_faster*",
        "*: sys.getswitchinterval(): * before, 0.001 after",
        "*ERROR at teardown of test_sets_a_policy*",
        "*: the event-loop policy: *",
    ])
    assert signal.getsignal(signal.SIGINT) is before  # put back
