"""FileHistoryProvider.save_messages keeps only the messages after their "overlap" with
the stored file (``filter_new_messages``): a message that repeats the last stored one,
or a batch that ends with the whole stored history, is never written
(items_round_trip_exactly, item_history_matches_model)."""

import asyncio
import tempfile
import warnings

from agent_framework import FileHistoryProvider, Message


async def _texts(directory: str, batches: list[list[Message]]) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FileHistoryProvider is marked experimental
        provider = FileHistoryProvider(directory)
    for batch in batches:
        await provider.save_messages("s", batch)
    return [m.text for m in await provider.get_messages("s")]


def main() -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        got = asyncio.run(_texts(one, [[Message("assistant", ["OK"])], [Message("assistant", ["OK"])]]))
        assert got == ["OK"], f"a repeated assistant turn was kept: {got}"
        got = asyncio.run(_texts(two, [[Message("user", ["yes"])],
                                       [Message("assistant", ["Shall I?"]), Message("user", ["yes"])]]))
        assert got == ["yes"], f"a turn ending with the stored history was kept: {got}"


if __name__ == "__main__":
    main()
