"""The JSONL log store: a directory with one file per session, one entry per line,
standard library only (POSIX: ``fcntl.flock``).

How it keeps each file-system fact that breaks naive log stores:

- *Appends never rewrite a file*: the file is opened with ``O_APPEND`` and a batch is
  written as whole lines, in one ``write`` when the kernel takes it all; nothing is
  ever written at an offset. The one exception is below: a torn tail is cut off.
- *Concurrent writers interleave bytes or lose lines*: every append and create holds an
  exclusive ``flock`` on the session's file while it brings its index up to date,
  checks ids and parents (:func:`~storetest.entries.check_batch`) and writes; readers
  hold a shared one, so they never see half a batch being written. ``flock`` locks
  belong to an open file, so threads of one process exclude each other too (each
  operation opens the file itself).
- *An append must not cost O(log length)*: each handle keeps, per session, an index
  (the entries and their ids, and how many bytes of the file they came from), built
  by the first call and then brought up to date, under the lock, from the bytes
  appended since (by any process). An append reads only those bytes.
- *A load must not cost more than the parse*: the bytes are read as the store's own
  lines, each parsed once by the C JSON scanner and its entry and message built
  without re-running the value checks (:func:`~storetest.codec.decode_trusted_json`,
  the cyclic collector paused); ids, parents, times and kinds are still checked, and
  anything off (a line that is not whole JSON, a field missing, an id twice) sends
  the read to the checked reader, which reads every field as ``Entry`` checks it and
  names the bad line. A field of the wrong type deep inside a message is what the
  fast reader does not see (as :func:`~storetest.codec.decode_trusted`).
- *Durability is a choice*: with ``fsync=True`` (the default) an append ``fsync``\\ s the
  file (and the directory, when the file is new) before it returns. With
  ``fsync=False`` a process crash still loses nothing acknowledged (the kernel has the
  bytes), but a power cut or kernel crash may lose the appends of the last few seconds.
- *A crash leaves a torn last line* (or, if killed inside a large ``write``, a batch
  whose first lines are whole): every line but the last of a batch carries
  ``"more": true``, so a batch is whole once its last line is. Whatever follows the
  last whole batch is a torn tail: reads leave it out, and the next append cuts it off
  (``ftruncate``, under the lock) before writing. A line that is not a whole entry
  anywhere else is corruption: :class:`LogCorrupted` names the file and the line
  number, and the store refuses to read or append to that session; it never skips it.
- *Session ids are exact strings, file systems are not* (case-insensitive, normalizing,
  255-byte names): the file name escapes every UTF-8 byte outside ``[a-z0-9]`` as
  ``_xx`` (lowercase hex), which is reversible and lowercase ASCII, so two ids never
  share a file on any file system. Names longer than 200 characters are cut into
  200-character directories (``<part>.d/``); any valid session id (up to 512 bytes,
  NUL included) works.
- *Times keep microseconds and the UTC offset*: ISO 8601 with microseconds and the
  offset (``2026-05-01T09:30:00.250001+02:00``). Custom JSON is kept as a JSON string,
  byte for byte. Lines are split on ``\\n`` only (``str.splitlines`` would also split
  on U+2028 and friends, which JSON leaves unescaped).

The first line of a file is a header, ``{"type":"session","version":1,"id":...}``,
written together with the first batch, and that first write is atomic: header and batch
go to a temporary file beside it (``.<name>.<random>.tmp``), which is synced (``fsync``) and
then hard-linked to the session's name (``os.link`` fails if another writer created the
file meanwhile: the batch is then appended to theirs). So a session's file never exists
without its header and first batch, and an empty file, or one whose first line is not
whole, is corruption (:class:`LogCorrupted`), not an empty session. A process killed
during a first write leaves no session file, only its temporary file (never read; remove
``.*.tmp`` files at leisure). The file system must support hard links. Then one entry a line, as in pi-mono's format:
``type``, ``id``, ``parentId``, ``timestamp``, and the payload (``message``;
``customType`` and ``data``; ``summary`` and ``firstKeptEntryId``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from reference_stores._entry_codec import gc_paused, payload_from_json
from storetest.codec import decode_trusted_json, encode_message
from storetest.contract import Message, StoreError, check_session_id
from storetest.entries import Compaction, Custom, Entry, check_batch, check_create, check_entries

__all__ = ["FORMAT_VERSION", "JsonlLogStore", "LogCorrupted", "session_path"]

FORMAT_VERSION: Final = 1
_SAFE: Final = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")
_PART: Final = 200  # characters per path component, well under NAME_MAX (255 bytes)
_DEFAULT_CACHE_SESSIONS: Final = 128


class LogCorrupted(StoreError):
    """A session's file is empty, lacks a whole header, or holds a line that is not a
    whole entry before its last line."""


def _escape(session: str) -> str:
    return "".join(chr(b) if b in _SAFE else f"_{b:02x}" for b in session.encode("utf-8"))


def session_path(directory: str | os.PathLike[str], session: str) -> Path:
    """The file holding ``session``'s log under ``directory`` (see the module docstring).

    :raises TypeError, ValueError: ``session`` is not a valid session id.
    """
    name = _escape(check_session_id(session))
    parts = [name[i : i + _PART] for i in range(0, len(name), _PART)]
    return Path(directory).joinpath(*(p + ".d" for p in parts[:-1]), parts[-1] + ".jsonl")


# json's string encoder (its C form), as json.dumps(..., ensure_ascii=False) uses it.
_string: Callable[[str], str] = json.encoder.encode_basestring
_MORE: Final = '"more":true,'


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _line(entry: Entry, more: bool) -> str:
    payload = entry.payload
    if isinstance(payload, Message):
        # The common line, formatted directly: what _dumps would make of the head dict
        # below (the same keys in the same order, each string escaped by json's own
        # encoder), at a fraction of the cost.
        parent = "null" if entry.parent_id is None else _string(entry.parent_id)
        return (
            f'{{"type":"{entry.kind}","id":{_string(entry.id)},"parentId":{parent},'
            f'"timestamp":"{entry.created_at.isoformat(timespec="microseconds")}",'
            f'{_MORE if more else ""}"message":{encode_message(payload)}}}\n'
        )
    head: dict[str, Any] = {
        "type": entry.kind,
        "id": entry.id,
        "parentId": entry.parent_id,
        "timestamp": entry.created_at.isoformat(timespec="microseconds"),
    }
    if isinstance(payload, Custom):
        head["customType"] = payload.kind
        head["data"] = payload.data
    elif isinstance(payload, Compaction):
        head["summary"] = payload.summary
        head["firstKeptEntryId"] = payload.first_kept_id
    if more:
        head["more"] = True
    return _dumps(head) + "\n"


def _entry(obj: Any) -> Entry:
    kind = obj["type"]
    if kind == "custom":
        payload: Message | Custom | Compaction = Custom(obj["customType"], obj["data"])
    elif kind == "compaction":
        payload = Compaction(obj["summary"], obj["firstKeptEntryId"])
    else:
        payload = payload_from_json(kind, obj["message"])
    return Entry(obj["id"], obj["parentId"], datetime.fromisoformat(obj["timestamp"]), kind, payload)


@dataclass
class _Index:
    """What one handle knows of one session's file: the whole batches in its first
    ``offset`` bytes (``lines`` lines)."""

    path: Path  # the session's file, computed once (escaping the id is not free)
    nested: bool  # whether the file lies in a directory of its own (a long session id)
    lock: threading.Lock = field(default_factory=threading.Lock)
    file: tuple[int, int] | None = None  # (st_dev, st_ino) the index was read from
    offset: int = 0
    lines: int = 0
    entries: list[Entry] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)

    def reset(self) -> None:
        self.file, self.offset, self.lines = None, 0, 0
        self.entries, self.ids = [], set()


class JsonlLogStore:
    """A log store (plain methods) keeping each session in ``<directory>/<name>.jsonl``.

    Several stores on one directory, in one process or many, are replicas of one
    another. Holds no open files between calls.

    :param directory: where the files go; created if missing.
    :param fsync: ``fsync`` every append before returning (default); see the module
        docstring for what ``False`` risks.
    :param cache_sessions: how many sessions' indexes a handle keeps (least recently
        used dropped first; a dropped one is rebuilt by reading its file).
    :raises ValueError: ``cache_sessions`` is less than 1.
    :raises StoreError: the directory cannot be created.

    Methods raise ``TypeError``/``ValueError`` for bad arguments (``ValueError`` for a
    batch :func:`~storetest.entries.check_batch` refuses, with nothing written),
    :class:`LogCorrupted` for a corrupt file and :class:`~storetest.contract.StoreError`
    when the file system fails, naming the operation, the session and the file.
    """

    def __init__(
        self, directory: str | os.PathLike[str], *, fsync: bool = True,
        cache_sessions: int = _DEFAULT_CACHE_SESSIONS,
    ) -> None:
        if not isinstance(cache_sessions, int) or cache_sessions < 1:
            raise ValueError(f"cache_sessions must be an int >= 1, not {cache_sessions!r}")
        self.directory = Path(directory)
        self.fsync = fsync
        self._cache_sessions = cache_sessions
        self._indexes: OrderedDict[str, _Index] = OrderedDict()
        self._lock = threading.Lock()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"creating the log directory {str(self.directory)!r} failed: {exc}") from exc

    def __repr__(self) -> str:
        return f"JsonlLogStore({str(self.directory)!r})"

    # -- the contract -------------------------------------------------------------

    def append(self, session: str, entries: Sequence[Entry]) -> None:
        """Append a batch atomically, creating the session if new.

        :raises ValueError: a duplicate id or an unknown parent (nothing written).
        :raises LogCorrupted, StoreError: see the class docstring (nothing written).
        """
        session = check_session_id(session)
        batch = check_entries(entries)
        if not batch:
            return

        def checked(index: _Index) -> Sequence[Entry]:
            if len(batch) == 1:
                # One entry, the common append: its id new and its parent there settle it;
                # anything else goes to check_batch, which names the fault.
                entry = batch[0]
                ids = index.ids
                if entry.id not in ids and (entry.parent_id is None or entry.parent_id in ids):
                    return batch
            check_batch(session, batch, index.ids)
            return batch

        self._write(session, "append to", checked)

    def entries(self, session: str) -> list[Entry]:
        """Every whole entry in append order; ``[]`` for a session never used."""
        session = check_session_id(session)
        index = self._index(session)
        path = index.path
        with index.lock:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                index.reset()
                return []
            except OSError as exc:
                raise StoreError(f"read of session {session!r} failed: {path}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                self._refresh(fd, index, session, path)
                return list(index.entries)
            except OSError as exc:
                raise StoreError(f"read of session {session!r} failed: {path}: {exc}") from exc
            finally:
                os.close(fd)

    def create(self, session: str, entries: Sequence[Entry]) -> bool:
        """Append a non-empty batch only if the session has no entries.

        :returns: ``True`` if written, ``False`` if the session already had entries.
        """
        session = check_session_id(session)
        batch = check_create(session, entries)
        return self._write(session, "create of", lambda index: None if index.entries else batch)

    # -- plumbing -----------------------------------------------------------------

    def _index(self, session: str) -> _Index:
        with self._lock:
            index = self._indexes.get(session)
            if index is None:
                path = session_path(self.directory, session)
                index = self._indexes[session] = _Index(path, path.parent != self.directory)
            self._indexes.move_to_end(session)
            while len(self._indexes) > self._cache_sessions:
                self._indexes.popitem(last=False)
            return index

    def _write(self, session: str, what: str, choose: Callable[[_Index], Sequence[Entry] | None]) -> bool:
        """Write the batch ``choose`` picks (``None``: nothing) from the session's index,
        brought up to date under the file's exclusive lock, with the torn tail, if any,
        cut off; or, for a session with no file, from an empty index, as a new file.
        Returns whether it wrote."""
        index = self._index(session)
        path = index.path
        with index.lock:
            while True:
                try:
                    if index.nested:
                        path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
                except FileNotFoundError:
                    index.reset()
                    batch = choose(index)
                    if batch is None:
                        return False
                    try:
                        if self._create_file(index, session, path, batch):
                            return True
                    except OSError as exc:
                        index.reset()
                        raise StoreError(f"{what} session {session!r} failed: {path}: {exc}") from exc
                    continue  # another writer created the file first: append to theirs
                except OSError as exc:
                    raise StoreError(f"{what} session {session!r} failed: {path}: {exc}") from exc
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    size = self._refresh(fd, index, session, path)
                    if size > index.offset:
                        os.ftruncate(fd, index.offset)
                    batch = choose(index)
                    if batch is None:
                        return False
                    self._write_batch(fd, index, batch)
                    return True
                except OSError as exc:
                    index.reset()
                    raise StoreError(f"{what} session {session!r} failed: {path}: {exc}") from exc
                finally:
                    os.close(fd)

    def _create_file(self, index: _Index, session: str, path: Path, batch: Sequence[Entry]) -> bool:
        """Write the header and ``batch`` to a temporary file and link it to ``path``:
        the file appears whole or not at all. ``False`` if ``path`` appeared meanwhile."""
        header = _dumps({"type": "session", "version": FORMAT_VERSION, "id": session}) + "\n"
        text = header + _lines(batch)
        data = text.encode("utf-8")
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, data)
            if self.fsync:
                os.fsync(fd)
            st = os.fstat(fd)
            try:
                os.link(temporary, path)
            except FileExistsError:
                return False
        finally:
            os.close(fd)
            os.unlink(temporary)
        if self.fsync:
            _fsync_directory(path.parent)
        index.file = (st.st_dev, st.st_ino)
        index.offset, index.lines = len(data), text.count("\n")
        index.entries.extend(batch)
        index.ids.update(e.id for e in batch)
        return True

    def _write_batch(self, fd: int, index: _Index, batch: Sequence[Entry]) -> None:
        data = _lines(batch).encode("utf-8")
        try:
            written = os.write(fd, data)  # all of it, but for a signal or a full disk
            if written != len(data):
                _write_all(fd, memoryview(data)[written:])
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            # Take back whatever part landed, so a failed append writes nothing.
            try:
                os.ftruncate(fd, index.offset)
            except OSError:
                pass
            raise
        index.offset += len(data)
        index.lines += len(batch)  # one line per entry: JSON escapes every newline inside one
        index.entries.extend(batch)
        if len(batch) == 1:
            index.ids.add(batch[0].id)
        else:
            index.ids.update(e.id for e in batch)

    def _refresh(self, fd: int, index: _Index, session: str, path: Path) -> int:
        """Read the bytes appended since the index was last brought up to date; return
        the file's size (whatever lies past ``index.offset`` then is a torn tail)."""
        st = os.fstat(fd)
        if index.file != (st.st_dev, st.st_ino) or st.st_size < index.offset:
            index.reset()  # a new or replaced file: read it from the start
            index.file = (st.st_dev, st.st_ino)
        if st.st_size == 0:
            index.reset()
            raise LogCorrupted(
                f"session {session!r} is corrupt: {path} is empty (the store writes a new file "
                "whole, with its header, so it was cut or made elsewhere)"
            )
        if st.st_size == index.offset:
            return st.st_size
        data = os.pread(fd, st.st_size - index.offset, index.offset)
        if index.lines == 0 and b"\n" not in data:
            index.reset()
            raise LogCorrupted(
                f"session {session!r} is corrupt: {path}: line 1 (the header) is not whole "
                "(the store writes a new file whole, so it was cut or made elsewhere)"
            )
        with gc_paused():
            read = _read_trusted(data, index.lines, session, index.ids)
        if read is None:  # something is off: the checked reader names the line, or accepts it
            read = _read_checked(data, index.lines, session, index.ids, index, path)
        committed, consumed, whole_lines = read
        index.entries += committed
        index.ids.update(e.id for e in committed)
        index.offset += consumed
        index.lines = whole_lines
        return st.st_size


def _check_header(obj: Any, session: str) -> None:
    if obj.get("type") != "session" or obj.get("id") != session:
        raise ValueError(f"not the header of session {session!r}")
    if obj.get("version") != FORMAT_VERSION:
        raise ValueError(f"format version {obj.get('version')!r}, not {FORMAT_VERSION}")


_Read = tuple[list[Entry], int, int]  # the whole batches' entries, their bytes, the lines up to them


def _read_checked(data: bytes, lines_before: int, session: str, ids: set[str], index: _Index, path: Path) -> _Read:
    """The whole batches in ``data`` (the bytes after ``lines_before`` lines), every field
    checked as ``Entry`` checks it; a bad line raises :class:`LogCorrupted` naming it."""
    pending: list[Entry] = []
    committed: list[Entry] = []
    start = 0
    consumed = 0
    line_no = lines_before
    whole_lines = lines_before
    seen: set[str] = set()
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            break
        line_no += 1
        obj: Any = None
        try:
            obj = json.loads(data[start:end])
            if line_no == 1:
                _check_header(obj, session)
            else:
                entry = _entry(obj)
                if entry.id in ids or entry.id in seen:
                    raise ValueError(f"entry id {entry.id!r} appears twice")
                seen.add(entry.id)
                pending.append(entry)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            index.reset()
            raise LogCorrupted(
                f"session {session!r} is corrupt: {path}: line {line_no} is not a whole entry "
                f"({exc}); only a torn last line can be dropped"
            ) from None
        start = end + 1
        if not (isinstance(obj, dict) and obj.get("more") is True):
            committed += pending
            pending = []
            consumed = start
            whole_lines = line_no
    return committed, consumed, whole_lines


_scan: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_fromisoformat = datetime.fromisoformat
_ENTRY_FIELDS: Final = tuple(
    Entry.__dict__[name].__set__ for name in ("id", "parent_id", "created_at", "kind", "payload")
)


def _read_trusted(data: bytes, lines_before: int, session: str, ids: set[str]) -> _Read | None:
    """What :func:`_read_checked` returns, for lines this store wrote: one UTF-8 decode of
    every whole line, the C JSON scanner on each (no ``json.loads`` wrapper), and messages
    built by :func:`~storetest.codec.decode_trusted_json` from the parsed line (never
    parsed twice). ``None`` when anything is off, for the checked reader to name."""
    end = data.rfind(b"\n") + 1
    try:
        lines = data[:end].decode("utf-8").split("\n")
        lines.pop()  # what follows the last newline: a torn tail, or nothing
        if not lines:
            return [], 0, lines_before
        if lines_before == 0:
            _check_header(json.loads(lines[0]), session)
        new: set[str] = set()
        new_entry, message = object.__new__, decode_trusted_json
        set_id, set_parent, set_created, set_kind, set_payload = _ENTRY_FIELDS
        pending: list[Entry] = []
        committed: list[Entry] = []
        whole = 0  # lines of ``lines`` up to the last whole batch
        for n in range(1 if lines_before == 0 else 0, len(lines)):
            line = lines[n]
            obj, stop = _scan(line, 0)
            if stop != len(line):
                return None
            entry_id = obj["id"]
            parent = obj["parentId"]
            kind = obj["type"]
            created = _fromisoformat(obj["timestamp"])
            if (type(entry_id) is not str or entry_id in ids or entry_id in new or created.tzinfo is None
                    or not (parent is None or type(parent) is str)):
                return None
            if kind == "message" or kind == "meta":
                # trusted_entry, inlined: this loop runs once per entry of a load
                entry = new_entry(Entry)
                set_id(entry, entry_id)
                set_parent(entry, parent)
                set_created(entry, created)
                set_kind(entry, kind)
                set_payload(entry, message(obj["message"]))
            else:
                entry = _entry(obj)
            new.add(entry_id)
            if obj.get("more") is True:
                pending.append(entry)
            else:
                if pending:
                    committed += pending
                    pending = []
                committed.append(entry)
                whole = n + 1
        if lines_before == 0 and whole == 0 and lines:
            whole = 1  # the header alone is whole
        torn = sum(len(line.encode("utf-8")) + 1 for line in lines[whole:])
        return committed, end - torn, lines_before + whole
    except (ValueError, KeyError, TypeError, AttributeError, StopIteration, IndexError):
        return None


def _lines(batch: Sequence[Entry]) -> str:
    if len(batch) == 1:
        return _line(batch[0], False)
    last = len(batch) - 1
    return "".join(_line(e, i < last) for i, e in enumerate(batch))


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:  # some file systems cannot fsync a directory
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)
