"""What the bindings share: giving a binding its outer factory's names, closing what a
factory handed over, and running every teardown step whatever fails."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["close_resource", "look_like", "run_all"]


async def close_resource(resource: Any) -> None:
    for name in ("dispose", "aclose", "close"):
        method = getattr(resource, name, None)
        if callable(method):
            result = method()
            if inspect.isawaitable(result):
                await result
            return


def look_like(binding: Any, factory: Callable[..., Any], default_name: str) -> None:
    """Give a binding its outer factory's signature and names: pytest fills fixtures by
    the signature, and reports and spawned children name the factory."""
    binding.__signature__ = inspect.signature(factory)
    binding.__name__ = getattr(factory, "__name__", default_name)
    binding.__qualname__ = getattr(factory, "__qualname__", binding.__name__)
    binding.__module__ = getattr(factory, "__module__", type(binding).__module__)


async def run_all(steps: Sequence[Callable[[], Awaitable[None]]]) -> None:
    errors: list[BaseException] = []
    for step in steps:
        try:
            await step()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
