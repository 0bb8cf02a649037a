"""What the LlamaIndex repros share: a message that runs a callback when a store
serializes it (to act between two writes of one call, with no timing), and a hook on
an engine the repro made that runs a callback once before a matching statement."""

from typing import Any

from llama_index.core.llms import ChatMessage
from sqlalchemy import event


class Probe(ChatMessage):
    """A user message that, the first time it is serialized, runs ``then``."""

    def _fire(self) -> None:
        then = self.__dict__.pop("_then", None)
        if then is not None:
            then()

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        self._fire()
        return super().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        self._fire()
        return super().model_dump_json(**kwargs)


def probe(text: str, then: Any) -> Probe:
    message = Probe(role="user", content=text)
    message.__dict__["_then"] = then
    return message


def once_before(engine: Any, starts: str, then: Any) -> None:
    """Run ``then`` once, right before ``engine`` executes a statement starting with ``starts``."""
    fired: list[bool] = []

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not fired and statement.lstrip().upper().startswith(starts):
            fired.append(True)
            then()

    event.listen(engine, "before_cursor_execute", hook)


def text(message: Any) -> Any:
    return message.content if isinstance(message, ChatMessage) else message
