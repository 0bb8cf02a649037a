"""What the bindings share: giving a binding its outer factory's names, entering and
closing what a factory handed over, and running every teardown step whatever fails."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

__all__ = ["close_resource", "enter_made", "exit_manager", "look_like", "run_all"]


async def close_resource(resource: Any) -> None:
    for name in ("dispose", "aclose", "close"):
        method = getattr(resource, name, None)
        if callable(method):
            result = method()
            if inspect.isawaitable(result):
                await result
            return


async def enter_made(made: Any, is_resource: Callable[[Any], bool], entered: list[Any]) -> Any:
    """What a factory made, entered when it is a context manager rather than the
    resource (``AsyncSqliteSaver.from_conn_string(...)``); ``entered`` gets the manager."""
    if is_resource(made):
        return made
    if hasattr(made, "__aenter__"):
        resource = await made.__aenter__()
    elif hasattr(made, "__enter__"):
        resource = await asyncio.to_thread(made.__enter__)
    else:
        return made
    entered.append(made)
    return resource


async def exit_manager(manager: Any) -> None:
    if hasattr(manager, "__aexit__"):
        await manager.__aexit__(None, None, None)
    else:
        await asyncio.to_thread(manager.__exit__, None, None, None)


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
