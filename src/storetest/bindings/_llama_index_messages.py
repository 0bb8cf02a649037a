"""LlamaIndex's messages as the item clauses see them (``llama-index-core`` imported here,
lazily: ``pip install 'storetest[llama-index]'``).

A ``ChatMessage`` is an item in one of two forms. A plain one (role ``user``,
``assistant`` or ``system``, one text block, no ``additional_kwargs``) is ``{"role": ...,
"content": text}``, so the item clauses' labelled batches go through unchanged. Any other
is what LlamaIndex's own serialization keeps, ``message.model_dump(mode="json")``:
``{"role", "additional_kwargs", "blocks"}``. Round trip means that dump, compared field by
field and type for type (:func:`storetest.items.same_value`): every role, every block
kind (text, images by URL and by bytes, audio, documents, thinking, tool calls), tool
calls in ``additional_kwargs`` with their raw arguments text byte for byte.

The values are drawn from the input-space model (:mod:`storetest._engine.inputs`): text
of every character family, tool arguments at each JSON production's edges.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from hypothesis import strategies as st

from storetest._engine import inputs, strategies
from storetest._engine.item_protocol import ItemProtocol
from storetest.items import Item

__all__ = ["ROLES", "chat_protocol", "llama_types", "to_item", "to_message"]

MISSING_LLAMA_INDEX: Final = (
    "a LlamaIndex chat store is bound through llama-index-core's ChatMessage, which is not "
    "installed: pip install 'storetest[llama-index]'"
)

#: Every MessageRole of llama-index-core 0.14.
ROLES: Final = ("system", "developer", "user", "assistant", "function", "tool", "chatbot", "model")
_PLAIN: Final = ("user", "assistant", "system")


def llama_types() -> Any:
    """``llama_index.core.base.llms.types``.

    :raises ImportError: llama-index-core is not installed (the message names the extra).
    """
    try:
        from llama_index.core.base.llms import types
    except ImportError as exc:
        raise ImportError(MISSING_LLAMA_INDEX) from exc
    return types


def to_message(item: Item) -> Any:
    """The ``ChatMessage`` an item stands for (either form, see the module)."""
    t = llama_types()
    if "blocks" in item:
        return t.ChatMessage.model_validate(item)
    return t.ChatMessage(role=item["role"], content=item["content"])


def to_item(message: object) -> Item:
    """The item for what a store returned: the plain form when it is one, else the dump;
    something not a ``ChatMessage`` (raw bytes, a dict) stays itself, a type mismatch."""
    t = llama_types()
    if not isinstance(message, t.ChatMessage):
        return message  # type: ignore[return-value]
    full: Item = message.model_dump(mode="json")
    blocks = full.get("blocks")
    only = blocks[0] if isinstance(blocks, list) and len(blocks) == 1 else None
    if (full.get("role") in _PLAIN and not full.get("additional_kwargs") and isinstance(only, dict)
            and set(only) == {"block_type", "text"} and only["block_type"] == "text" and isinstance(only["text"], str)):
        return {"role": full["role"], "content": only["text"]}
    return full


def _call(i: int, arguments: str) -> Any:
    """An assistant turn as OpenAI's LLM class keeps it: tool calls in ``additional_kwargs``,
    the raw arguments text as the provider sent it."""
    t = llama_types()
    return t.ChatMessage(role="assistant", content=None, additional_kwargs={"tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": arguments}}]})


def _corpus() -> tuple[Item, ...]:
    t = llama_types()
    texts = [s for s in (*strategies.NASTY_TEXTS, *inputs.family_values()) if "\x00" not in s]
    arguments = [a for edges in inputs.JSON_EDGES.values() for a in edges if "\x00" not in a]
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
    made = [
        *(t.ChatMessage(role=role, content=f"a {role} turn") for role in ROLES),
        t.ChatMessage(role="user", content=""),
        t.ChatMessage(role="user", blocks=[
            t.TextBlock(text="look at these"), t.ImageBlock(url="https://example.com/a.png", detail="high"),
            t.ImageBlock(image=png, image_mimetype="image/png"),
            t.ImageBlock(url="data:image/png;base64,iVBORw0KGgo=")]),
        t.ChatMessage(role="user", blocks=[t.AudioBlock(audio=b"RIFF\x00\x00WAVE", format="wav"),
                                           t.DocumentBlock(data=b"%PDF-1.7\n", title="doc",
                                                           document_mimetype="application/pdf"),
                                           t.VideoBlock(url="https://example.com/v.mp4", fps=24)]),
        t.ChatMessage(role="assistant", blocks=[
            t.ThinkingBlock(content="first, the weather", num_tokens=7, additional_information={"signature": "s"}),
            t.ToolCallBlock(tool_call_id="call_b", tool_name="search", tool_kwargs={"q": "é", "n": 1.0, "big": 2**64}),
            t.TextBlock(text="calling")], additional_kwargs={"model": "m", "numbers": [1, 1.0, True, -0.0, 1e300]}),
        t.ChatMessage(role="tool", content='{"ok": true, "n": 1.0}',
                      additional_kwargs={"tool_call_id": "call_0", "name": "lookup"}),
        *(_call(i, a) for i, a in enumerate([*strategies.NASTY_ARGUMENTS, *arguments])),
        *(t.ChatMessage(role="user", content=s) for s in texts),
        t.ChatMessage(role="assistant", blocks=[t.TextBlock(text=s) for s in texts[:8]]),
    ]
    return tuple(to_item(m) for m in made)


def _nul() -> tuple[Item, ...]:
    t = llama_types()
    return tuple(to_item(m) for m in (
        t.ChatMessage(role="user", content="a\x00b"), t.ChatMessage(role="user", content="\x00"),
        _call(0, '{"q": "a\x00b"}'), t.ChatMessage(role="assistant", content="", additional_kwargs={"a\x00b": 1}),
    ))


def _generated() -> Any:
    t = llama_types()
    text = strategies.texts.filter(lambda s: "\x00" not in s)
    return st.one_of(
        st.sampled_from(_corpus()),
        st.builds(lambda role, s: to_item(t.ChatMessage(role=role, content=s)), st.sampled_from(ROLES), text),
        st.builds(lambda i, a: to_item(_call(i, a)), st.integers(0, 99),
                  strategies.tool_arguments.filter(lambda s: "\x00" not in s)),
        st.builds(lambda role, kw, s: to_item(t.ChatMessage(role=role, content=s, additional_kwargs=kw)),
                  st.sampled_from(ROLES), st.dictionaries(text, strategies.json_values, max_size=3), text),
        st.builds(lambda url, data: to_item(t.ChatMessage(role="user", blocks=[
            t.ImageBlock(url=f"https://example.com/{url}.png"), t.ImageBlock(image=data, image_mimetype="image/png")])),
            st.text("abc123", min_size=1, max_size=8), st.binary(min_size=1, max_size=64)),
    )


@functools.cache
def chat_protocol(pops: bool = True, atomic_batches: bool = False) -> ItemProtocol:
    """The item clauses' values for a LlamaIndex chat store: its messages, no
    ``get_items(limit)``; ``pop_item`` is ``delete_last_message`` where it has one; a
    batch is one write only where the store has ``add_messages``."""
    corpus = _corpus()
    pool = (*corpus[:4], *({"role": "user", "content": f"m{i}"} for i in range(6)))
    return ItemProtocol(
        corpus=corpus, nul=_nul(), batches=st.lists(_generated(), min_size=1, max_size=5),
        model_batches=st.lists(st.sampled_from(pool), max_size=3),
        with_arguments=lambda raw: to_item(_call(0, raw)), pops=pops, limits=False, atomic_batches=atomic_batches,
        tamper=_tamper)


def _tamper(handle: object, session: str, value: object, after: str) -> None:
    # A caller holds ChatMessages: the ones it passed to add_message, the list get_messages returned.
    t = llama_types()
    held = getattr(handle, "passed" if after.startswith("add") else "returned", {}).get(session)
    if not isinstance(held, list):
        return
    if held and isinstance(held[0], t.ChatMessage):
        held[0].blocks = [t.TextBlock(text=f"changed by the caller after {after}")]
    held.append(t.ChatMessage(role="user", content=f"appended by the caller after {after}"))
