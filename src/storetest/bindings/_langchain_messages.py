"""LangChain's messages as the item clauses see them (``langchain-core`` imported here,
lazily: ``pip install 'storetest[langchain]'``).

A message is an item in one of two forms. A plain one (a ``HumanMessage``,
``AIMessage`` or ``SystemMessage`` with string content and every other field at its
default) is ``{"role": "user" | "assistant" | "system", "content": text}``, so the item
clauses' labelled batches go through unchanged. Any other is what LangChain's own
serialization keeps, ``message_to_dict(message)``: ``{"type": "ai", "data": {...}}``.
Round trip then means what ``message_to_dict`` / ``messages_from_dict`` keep, compared
field by field and type for type (:func:`storetest.items.same_value`): ``tool_calls``
with their ``args``, ``invalid_tool_calls``, ``additional_kwargs`` (a raw tool-arguments
string there byte for byte), ``response_metadata``, ``id``, ``name``, content blocks.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from hypothesis import strategies as st

from storetest._engine import strategies
from storetest._engine.item_protocol import ItemProtocol
from storetest.items import Item, same_value

__all__ = ["chat_protocol", "langchain", "to_item", "to_message"]

MISSING_LANGCHAIN: Final = (
    "a LangChain chat history is bound through langchain-core's messages, which are not "
    "installed: pip install 'storetest[langchain]'"
)

_ROLES: Final = {"user": "HumanMessage", "assistant": "AIMessage", "system": "SystemMessage"}


def langchain() -> Any:
    """``langchain_core.messages``.

    :raises ImportError: langchain-core is not installed (the message names the extra).
    """
    try:
        from langchain_core import messages
    except ImportError as exc:
        raise ImportError(MISSING_LANGCHAIN) from exc
    return messages


def to_message(item: Item) -> Any:
    """The LangChain message an item stands for (either form, see the module)."""
    lc = langchain()
    if "data" in item and "type" in item:
        return lc.messages_from_dict([item])[0]
    return getattr(lc, _ROLES[str(item["role"])])(content=item["content"])


def to_item(message: object) -> Item:
    """The item for what a history returned: the plain form when nothing but the role and
    text is set, else ``message_to_dict``; something not a message stays itself."""
    lc = langchain()
    if not isinstance(message, lc.BaseMessage):
        return message  # type: ignore[return-value]  # compared as it is: a type mismatch
    full: Item = lc.message_to_dict(message)
    for role, name in _ROLES.items():
        if type(message) is getattr(lc, name) and isinstance(message.content, str):
            plain: Item = {"role": role, "content": message.content}
            if same_value(lc.message_to_dict(to_message(plain)), full):
                return plain
    return full


def _raw_call(i: int, arguments: str) -> Any:
    """An assistant turn as a provider returns it: the raw arguments text kept in
    ``additional_kwargs``, the parsed ``args`` beside it."""
    lc = langchain()
    return lc.AIMessage(content="", id=f"run-{i}", additional_kwargs={"tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": arguments}}]},
        tool_calls=[{"name": "lookup", "args": {"i": i}, "id": f"call_{i}", "type": "tool_call"}])


def _corpus() -> tuple[Item, ...]:
    lc = langchain()
    texts = tuple(t for t in strategies.NASTY_TEXTS if "\x00" not in t)
    numbers = [n for n in strategies.NASTY_NUMBERS if n is not None]
    made = [
        lc.HumanMessage("plain text"),
        lc.SystemMessage(""),
        lc.HumanMessage(content=[{"type": "text", "text": "look at this"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}],
                        id="msg_1", name="alice"),
        lc.AIMessage(content=[{"type": "text", "text": "calling"}], id="run-1", name="bot",
                     tool_calls=[{"name": "search", "args": {"q": "é", "n": 1.0, "big": 2**64, "deep": [[{}]]},
                                  "id": "call_a", "type": "tool_call"}],
                     invalid_tool_calls=[{"name": "broken", "args": '{"q": ', "id": "call_b", "error": "bad JSON",
                                          "type": "invalid_tool_call"}],
                     response_metadata={"model_name": "m", "numbers": numbers, "": "empty key", "True": True},
                     usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}),
        *(_raw_call(i, a) for i, a in enumerate(strategies.NASTY_ARGUMENTS)),
        lc.ToolMessage(content='{"ok": true, "n": 1.0}', tool_call_id="call_a", status="success", name="search"),
        lc.ToolMessage(content=[{"type": "text", "text": "failed"}], tool_call_id="call_b", status="error",
                       artifact={"trace": [1, 1.0, True]}),
        lc.ChatMessage(content="a role of its own", role="developer"),
        *(lc.HumanMessage(text) for text in texts),
        lc.AIMessage(content=[{"type": "text", "text": t} for t in texts]),
    ]
    return tuple(to_item(m) for m in made)


def _nul() -> tuple[Item, ...]:
    lc = langchain()
    return tuple(to_item(m) for m in (
        lc.HumanMessage("a\x00b"), lc.HumanMessage("\x00"), _raw_call(0, '{"q": "a\x00b"}'),
        lc.AIMessage(content="", response_metadata={"a\x00b": "a NUL in a key"}),
    ))


def _generated() -> Any:
    lc = langchain()
    text = strategies.texts.filter(lambda s: "\x00" not in s)
    values = strategies.json_values
    return st.one_of(
        st.sampled_from(_corpus()),
        st.builds(lambda role, s: to_item(getattr(lc, _ROLES[role])(s)), st.sampled_from(sorted(_ROLES)), text),
        st.builds(lambda i, a: to_item(_raw_call(i, a)), st.integers(0, 99),
                  strategies.tool_arguments.filter(lambda s: "\x00" not in s)),
        st.builds(lambda args, meta: to_item(lc.AIMessage(
            content="", tool_calls=[{"name": "f", "args": args, "id": "c", "type": "tool_call"}],
            response_metadata=meta)), st.dictionaries(text, values, max_size=3), st.dictionaries(text, values,
                                                                                                   max_size=2)),
        st.builds(lambda s, ok: to_item(lc.ToolMessage(content=s, tool_call_id="c",
                                                       status="success" if ok else "error")), text, st.booleans()),
    )


@functools.cache
def chat_protocol() -> ItemProtocol:
    """The item clauses' values and methods for a LangChain chat history: its messages,
    no ``pop_item``, no ``get_items(limit)``; a caller's changes go to the messages."""
    corpus = _corpus()
    pool = (*corpus[:4], *({"role": "user", "content": f"m{i}"} for i in range(6)))
    return ItemProtocol(
        corpus=corpus, nul=_nul(), batches=st.lists(_generated(), min_size=1, max_size=5),
        model_batches=st.lists(st.sampled_from(pool), max_size=3),
        with_arguments=lambda raw: to_item(_raw_call(0, raw)),
        pops=False, limits=False, tamper=_tamper)


def _tamper(history: object, session: str, value: object, after: str) -> None:
    # The items the clause holds are copies; a caller of a chat history holds messages:
    # the ones it passed to add_messages, the list messages returned.
    lc = langchain()
    held = getattr(history, "passed" if after.startswith("add") else "returned", {}).get(session)
    if not isinstance(held, list):
        return
    if held and isinstance(held[0], lc.BaseMessage):
        held[0].content = f"changed by the caller after {after}"
    held.append(lc.HumanMessage(f"appended by the caller after {after}"))
