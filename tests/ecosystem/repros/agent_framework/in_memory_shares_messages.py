"""InMemoryHistoryProvider keeps the caller's ``Message`` objects: a caller changing a
message after saving it changes the history (items_are_not_aliased; the framework does
not document either way)."""

import asyncio
from typing import Any

from agent_framework import InMemoryHistoryProvider, Message


async def _run() -> list[str]:
    provider, state = InMemoryHistoryProvider(), dict[str, Any]()
    sent = Message("user", ["what the caller said"])
    await provider.save_messages("s", [sent], state=state)
    sent.contents[0].text = "changed by the caller after save_messages"
    return [m.text for m in await provider.get_messages("s", state=state)]


def main() -> None:
    got = asyncio.run(_run())
    assert got == ["changed by the caller after save_messages"], got


if __name__ == "__main__":
    main()
