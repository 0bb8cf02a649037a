"""The protocol's own method names in the messages, and the heartbeat at any deadline
(issue 44): a sync LangChain history whose ``messages`` hangs is reported as
``messages(...)`` (not the binding's ``get_items``) and its thread as abandoned (it
cannot be cancelled); the heartbeat names the call in flight before the deadline ends
it, whatever the deadline."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

import storetest
from storetest.results import Progress

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from storetest.bindings.langchain import chat_histories


class Hung(BaseChatMessageHistory):
    """A history whose ``messages`` waits for ``release``."""

    release: ClassVar[threading.Event] = threading.Event()

    def __init__(self) -> None:
        self._kept: list[BaseMessage] = []

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        Hung.release.wait(3600)
        return list(self._kept)

    def add_messages(self, messages: Any) -> None:
        self._kept.extend(messages)

    def clear(self) -> None:
        self._kept.clear()


@pytest.fixture
def released() -> Iterator[None]:
    Hung.release = threading.Event()
    try:
        yield
    finally:
        Hung.release.set()


def test_a_hung_messages_is_named_as_the_protocol_names_it(released: None) -> None:
    seen: list[Progress] = []
    report = storetest.check(chat_histories(lambda: lambda session_id: Hung()), clauses=["items_keep_their_order"],
                             call_timeout=1, seed=1, progress=lambda p: seen.append(Progress(**vars(p))))
    (result,) = report.results
    assert result.outcome == "failed", str(report)
    assert result.diagnosis.startswith("messages('st-"), result.diagnosis
    assert "get_items" not in result.diagnosis and "abandoned" in result.diagnosis, result.diagnosis
    # The heartbeat (every 10 s by default) came within the 1 s deadline, naming the call.
    flying = [what for p in seen for what, _ in p.in_flight]
    assert any(what.startswith("messages('st-") for what in flying), [vars(p) for p in seen]
