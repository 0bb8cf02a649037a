"""FileHistoryProvider appends a batch's JSON lines to the session's file with no
commit step: a writer that dies in the middle (killed, out of disk, a file size limit)
leaves half a line, and from then on every get_messages of that session raises
ValueError ("Failed to deserialize history line ..."): the whole history is unreadable,
and every later save_messages too (items_survive_a_crash).

Deterministic: a forked child saves one message, then a second under a file size limit
(RLIMIT_FSIZE) that stops its write half way, as a kill would."""

import asyncio
import os
import resource
import signal
import tempfile
import warnings
from pathlib import Path

from agent_framework import FileHistoryProvider, Message


def _provider(directory: str) -> FileHistoryProvider:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FileHistoryProvider is marked experimental
        return FileHistoryProvider(directory)


def _child(directory: str) -> None:
    provider = _provider(directory)
    asyncio.run(provider.save_messages("s", [Message("user", ["the first turn"])]))
    size = next(Path(directory).glob("*.jsonl")).stat().st_size
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, size + 40))
    try:
        asyncio.run(provider.save_messages("s", [Message("assistant", ["x" * 4000])]))
    except OSError:
        pass
    os._exit(0)


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        pid = os.fork()
        if pid == 0:
            _child(directory)
        os.waitpid(pid, 0)
        try:
            asyncio.run(_provider(directory).get_messages("s"))
        except ValueError as exc:
            assert "Failed to deserialize history line 2" in str(exc), exc
            return
        raise AssertionError("get_messages read the history back after a write was cut short")


if __name__ == "__main__":
    main()
