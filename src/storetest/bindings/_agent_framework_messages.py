"""Microsoft Agent Framework's messages as the item clauses see them (``agent-framework-core``
imported here, lazily: ``pip install 'storetest[agent-framework]'``).

A message is an item in one of two forms. A plain one (one text content, no other field
set) is ``{"role": role, "content": text}``, so the item clauses' labelled batches go
through unchanged. Any other is what the framework's own serialization keeps,
``Message.to_dict()``: ``{"type": "message", "role": ..., "contents": [...]}``. Round
trip then means what ``to_dict`` / ``Message.from_dict`` keep, compared field by field
and type for type (:func:`storetest.items.same_value`): every content kind the framework
has (text, reasoning, data, URIs, errors, function calls with raw ``arguments`` byte for
byte, their results, approvals, usage, hosted files, MCP, shell, computer, search, code
interpreter and image generation calls and results), ``author_name``, ``message_id`` and
``additional_properties`` with numbers of every size.
"""

from __future__ import annotations

import base64
import functools
import warnings
from typing import Any, Final

from hypothesis import strategies as st

from storetest._engine import strategies
from storetest._engine.item_protocol import ItemProtocol
from storetest.items import Item, same_value

__all__ = ["agent_framework", "messages_protocol", "to_item", "to_message"]

MISSING_AGENT_FRAMEWORK: Final = (
    "a Microsoft Agent Framework history provider is bound through agent-framework-core's messages, "
    "which are not installed: pip install 'storetest[agent-framework]'"
)


def agent_framework() -> Any:
    """The ``agent_framework`` package.

    :raises ImportError: agent-framework-core is not installed (the message names the extra).
    """
    try:
        import agent_framework
    except ImportError as exc:
        raise ImportError(MISSING_AGENT_FRAMEWORK) from exc
    return agent_framework


def to_message(item: Item) -> Any:
    """The framework's ``Message`` an item stands for (either form, see the module)."""
    af = agent_framework()
    if "contents" in item:
        return af.Message.from_dict(item)
    return af.Message(str(item["role"]), [str(item["content"])])


def to_item(message: object) -> Item:
    """The item for what a provider returned: the plain form when nothing but the role
    and one text is set, else ``to_dict()``; something not a message stays itself."""
    af = agent_framework()
    if not isinstance(message, af.Message):
        return message  # type: ignore[return-value]  # compared as it is: a type mismatch
    full: Item = message.to_dict()
    contents = message.contents
    if len(contents) == 1 and contents[0].type == "text" and isinstance(contents[0].text, str):
        plain: Item = {"role": full.get("role"), "content": contents[0].text}
        if same_value(to_message(plain).to_dict(), full):
            return plain
    return full


def _call(i: int, arguments: str) -> Any:
    af = agent_framework()
    return af.Message("assistant", [af.Content.from_function_call(f"call_{i}", "lookup", arguments=arguments)])


def _made() -> list[Any]:
    af = agent_framework()
    c, m = af.Content, af.Message
    numbers = list(strategies.NASTY_NUMBERS)
    call = c.from_function_call("call_a", "search", arguments={"q": "é", "n": 1.0, "deep": [[{}]]})
    return [
        m("user", ["plain text"]),
        m("system", [""]),
        m("user", [c.from_text("look at this"), c.from_uri("https://example.com/a b.png", media_type="image/png"),
                   c.from_data(b"\x00\x01\xff", "application/pdf", name="a b.pdf")],
          author_name="alice", message_id="msg_1"),
        m("assistant", [c.from_text_reasoning(id="rs_1", text="thinking", protected_data="opaque"), call,
                        c.from_usage({"input_token_count": 3, "output_token_count": 4, "total_token_count": 7})],
          message_id="run-1", additional_properties={"numbers": numbers, "": "empty key", "True": True}),
        m("tool", [c.from_function_result("call_a", result='{"ok": true, "n": 1.0}'),
                   c.from_function_result("call_b", exception="it failed", status="failed")]),
        m("assistant", [c.from_error(message="rate limited", error_code="429", error_details="retry")]),
        m("assistant", [c.from_function_approval_request("apr_1", call)]),
        m("user", [c.from_function_approval_response(False, "apr_1", call)]),
        m("assistant", [c.from_hosted_file("file_1", media_type="text/csv", name="t.csv"),
                        c.from_hosted_vector_store("vs_1"), c.from_oauth_consent_request("https://example.com/ok")]),
        m("assistant", [c.from_mcp_server_tool_call("mcp_1", "read", server_name="files", arguments='{"p": "/"}'),
                        c.from_mcp_server_tool_result("mcp_1", output=[{"k": 2**53 + 1}])]),
        m("assistant", [c.from_shell_tool_call(call_id="sh_1", commands=["ls -la", "echo 'é'"], timeout_ms=1000),
                        c.from_shell_tool_result(call_id="sh_1", outputs=[c.from_shell_command_output(
                            stdout="a\r\nb", stderr="", exit_code=0, timed_out=False)])]),
        m("assistant", [c.from_search_tool_call("s_1", tool_name="web_search", arguments={"q": "x"}),
                        c.from_search_tool_result("s_1", tool_name="web_search", result={"hits": [1, 1.0]})]),
        m("assistant", [c.from_code_interpreter_tool_call(call_id="ci_1", inputs=[c.from_text("print(1)")]),
                        c.from_code_interpreter_tool_result(call_id="ci_1", outputs=[c.from_text("1")]),
                        c.from_image_generation_tool_call(image_id="img_1"),
                        c.from_image_generation_tool_result(image_id="img_1", outputs=c.from_uri(
                            "data:image/png;base64,iVBORw0KGgo=", media_type="image/png"))]),
        m("assistant", [c.from_computer_tool_call(id="cu_1", call_id="cu_c", actions=[{"type": "click", "x": 1}]),
                        c.from_computer_tool_result(call_id="cu_c")]),
        m("developer", ["a role of its own"]),
        *(_call(i, a) for i, a in enumerate(strategies.NASTY_ARGUMENTS)),
        *(m("user", [text]) for text in strategies.NASTY_TEXTS if "\x00" not in text),
        m("assistant", [t for t in strategies.NASTY_TEXTS if "\x00" not in t]),
    ]


def _corpus() -> tuple[Item, ...]:
    with warnings.catch_warnings():  # the framework marks some content kinds experimental
        warnings.simplefilter("ignore")
        return tuple(to_item(message) for message in _made())


def _nul() -> tuple[Item, ...]:
    af = agent_framework()
    return tuple(to_item(m) for m in (
        af.Message("user", ["a\x00b"]), af.Message("user", ["\x00"]), _call(0, '{"q": "a\x00b"}'),
        af.Message("assistant", ["x"], additional_properties={"a\x00b": "a NUL in a key"}),
    ))


def _generated() -> Any:
    af = agent_framework()
    text = strategies.texts.filter(lambda s: "\x00" not in s)
    roles = st.sampled_from(["user", "assistant", "system", "tool"])
    return st.one_of(
        st.sampled_from(_corpus()),
        st.builds(lambda role, s: to_item(af.Message(role, [s])), roles, text),
        st.builds(lambda i, a: to_item(_call(i, a)), st.integers(0, 99),
                  strategies.tool_arguments.filter(lambda s: "\x00" not in s)),
        st.builds(lambda role, props, ident: to_item(af.Message(role, ["x"], message_id=ident,
                                                                additional_properties=props)),
                  roles, st.dictionaries(text, strategies.json_values, max_size=3), st.none() | text),
    )


@functools.cache
def messages_protocol() -> ItemProtocol:
    """The item clauses' values and methods for a history provider: the framework's
    messages; no ``pop_item``, no ``get_items(limit)``, no ``clear_session``."""
    corpus = _corpus()
    pool = (*corpus[:4], *({"role": "user", "content": f"m{i}"} for i in range(6)))
    return ItemProtocol(
        corpus=corpus, nul=_nul(), batches=st.lists(_generated(), min_size=1, max_size=5),
        model_batches=st.lists(st.sampled_from(pool), max_size=3),
        with_arguments=lambda raw: to_item(_call(0, raw)),
        pops=False, limits=False, clears=False, tamper=_tamper)


def _tamper(history: object, session: str, value: object, after: str) -> None:
    # A caller of a provider holds messages: the ones it passed to save_messages, the
    # list get_messages returned.
    af = agent_framework()
    held = getattr(history, "passed" if after.startswith("add") else "returned", {}).get(session)
    if not isinstance(held, list):
        return
    if held and isinstance(held[0], af.Message):
        held[0].contents[0].text = f"changed by the caller after {after}"
    held.append(af.Message("user", [f"appended by the caller after {after}"]))


def from_transcript(messages: Any) -> list[Any]:
    """The framework's messages for storetest's own (:mod:`storetest.contract`): a text,
    a function call with its raw ``arguments``, a function result (``status="error"``
    when ``is_error``), data with its media type, in order."""
    from storetest.contract import Attachment, Text, ToolCall

    c = agent_framework().Content

    def content(part: Any) -> Any:
        if isinstance(part, Text):
            return c.from_text(part.text)
        if isinstance(part, ToolCall):
            return c.from_function_call(part.id, part.name, arguments=part.arguments)
        if isinstance(part, Attachment):
            return c.from_data(part.data, part.media_type)
        return c.from_function_result(part.call_id, result=part.content, status="error" if part.is_error else None)

    return [agent_framework().Message(m.role, [content(p) for p in m.content]) for m in messages]


def to_transcript(messages: Any) -> Any:
    """storetest's messages for the framework's (the inverse of :func:`from_transcript`);
    what is not a list of the framework's messages stays itself, to be reported."""
    from storetest.contract import Attachment, Message, Text, ToolCall, ToolResult

    af = agent_framework()
    if not isinstance(messages, list) or not all(isinstance(m, af.Message) for m in messages):
        return messages

    def part(c: Any) -> Any:
        if c.type == "text":
            return Text(c.text)
        if c.type == "function_call":
            return ToolCall(c.call_id, c.name, c.arguments)
        if c.type == "data":
            return Attachment(c.media_type, base64.b64decode(str(c.uri).rpartition(",")[2]))
        return ToolResult(c.call_id, c.result, c.status == "error")

    return [Message(m.role, tuple(part(c) for c in m.contents)) for m in messages]
