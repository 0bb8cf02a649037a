"""A session store in one JSON file, written from README.md and docs/contract.md alone.

It exists to show that the page is enough to write a store that passes. Every
operation takes an exclusive ``flock`` on a lock file beside the data (so handles in
other threads, other stores on the same file and other processes wait their turn),
reads the whole file, and writes a new one with ``os.replace`` (so a reader never sees
half a write). Messages are kept as ``storetest.encode_message`` text, which keeps tool
arguments byte for byte. Whole-file rewrites make it slow for long conversations; it is
an example, not a reference store.

    storetest check examples.json_file_store:make_store --replica examples.json_file_store:make_replica
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from storetest import (
    CodecError,
    Message,
    StoreError,
    check_messages,
    check_session_id,
    check_steer_text,
    decode_messages,
    encode_messages,
)

__all__ = ["JSONFileStore", "make_replica", "make_store"]


class JSONFileStore:
    """Transcripts and steer queues of many sessions in one JSON file.

    :param path: the data file (created on the first write); ``<path>.lock`` beside it
        is the lock every handle on the file shares.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._threads = threading.Lock()  # flock does not exclude threads sharing one descriptor
        try:
            self._lock_file = open(f"{self.path}.lock", "a+b")  # closed in close()
        except OSError as exc:
            raise StoreError(f"opening the lock file of {str(self.path)!r} failed: {exc}") from exc

    def close(self) -> None:
        self._lock_file.close()

    def __enter__(self) -> JSONFileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the contract ------------------------------------------------------------

    def save(self, session: str, messages: Sequence[Message]) -> None:
        session = check_session_id(session)
        encoded = encode_messages(check_messages(messages))
        with self._locked(f"save to session {session!r}") as data:
            data["transcripts"][session] = encoded
            self._write(data)

    def messages(self, session: str) -> list[Message]:
        session = check_session_id(session)
        with self._locked(f"read of session {session!r}") as data:
            encoded = list(data["transcripts"].get(session, []))
        try:
            return decode_messages(encoded)
        except CodecError as exc:
            raise StoreError(f"read of session {session!r} failed: {exc}") from exc

    def add_steer(self, session: str, text: str) -> None:
        session = check_session_id(session)
        text = check_steer_text(text)
        with self._locked(f"add_steer to session {session!r}") as data:
            data["steers"].setdefault(session, []).append(text)
            self._write(data)

    def take_steers(self, session: str) -> list[str]:
        session = check_session_id(session)
        with self._locked(f"take_steers from session {session!r}") as data:
            taken: list[str] = data["steers"].pop(session, [])
            if taken:
                self._write(data)
        return list(taken)

    # -- the file ----------------------------------------------------------------

    @contextmanager
    def _locked(self, what: str) -> Iterator[dict[str, Any]]:
        """Hold both locks and give the file's data; an OS or JSON error becomes ``StoreError``."""
        with self._threads:
            try:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX)
            except (OSError, ValueError) as exc:  # ValueError: the store was closed
                raise StoreError(f"{what} failed: {exc}") from exc
            try:
                try:
                    raw = self.path.read_text(encoding="ascii")
                except FileNotFoundError:
                    raw = '{"transcripts": {}, "steers": {}}'
                yield json.loads(raw)
            except (OSError, ValueError) as exc:
                raise StoreError(f"{what} failed: {exc}") from exc
            finally:
                fcntl.flock(self._lock_file, fcntl.LOCK_UN)

    def _write(self, data: dict[str, Any]) -> None:
        # ensure_ascii: the file is plain ASCII, NUL and every other character escaped.
        fd, temporary = tempfile.mkstemp(prefix=self.path.name, dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as out:
                json.dump(data, out, ensure_ascii=True)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def make_store(tmp_path: Path) -> Iterator[JSONFileStore]:
    """The factory: a store on a new file in the clause's directory."""
    with JSONFileStore(tmp_path / "sessions.json") as store:
        yield store


def make_replica(primary: JSONFileStore) -> Iterator[JSONFileStore]:
    """The replica factory: a second handle on the same file."""
    with JSONFileStore(primary.path) as store:
        yield store
