"""A message that runs a callback when a history serializes it (``message_to_dict``
calls ``model_dump``): the repros use it to act between two writes of one
``add_messages`` call, through the histories' public API, with no timing."""

from typing import Any

from langchain_core.messages import HumanMessage


class Probe(HumanMessage):
    """A human message that, the first time it is serialized, runs ``then``."""

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        then = self.__dict__.pop("_then", None)
        if then is not None:
            then()
        return super().model_dump(**kwargs)


def probe(content: str, then: Any) -> Probe:
    message = Probe(content)
    message.__dict__["_then"] = then
    return message
