"""InMemoryHistoryProvider.save_messages keeps only the messages after their "overlap"
with the stored history (``filter_new_messages``): a message that repeats the last
stored one (an assistant saying "OK" twice, two empty system messages), or a batch that
ends with the whole stored history, is dropped (items_round_trip_exactly,
item_history_matches_model)."""

import asyncio
from typing import Any

from agent_framework import InMemoryHistoryProvider, Message


async def _texts(provider: Any, batches: list[list[Message]]) -> list[str]:
    state: dict[str, Any] = {}
    for batch in batches:
        await provider.save_messages("s", batch, state=state)
    return [m.text for m in await provider.get_messages("s", state=state)]


def main() -> None:
    provider = InMemoryHistoryProvider()
    got = asyncio.run(_texts(provider, [[Message("assistant", ["OK"])], [Message("assistant", ["OK"])]]))
    assert got == ["OK"], f"a repeated assistant turn was kept: {got}"
    got = asyncio.run(_texts(provider, [[Message("user", ["yes"])],
                                        [Message("assistant", ["Shall I?"]), Message("user", ["yes"])]]))
    assert got == ["yes"], f"a turn ending with the stored history was kept: {got}"


if __name__ == "__main__":
    main()
