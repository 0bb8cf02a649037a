"""The incremental save every SQL reference store shares: what to keep, what to write.

An agent saves its whole transcript before every model request, so a store that
rewrites it all pays O(turns) per save, and one that finds the unchanged prefix by
re-encoding and re-hashing every message pays the same in CPU. This module finds the
prefix in work proportional to what changed, for the handle that wrote last *and* for
a replica that did not, and leaves each backend only its statements.

What is stored, per session (the backends' ``SCHEMA`` spell it in their own types):

- a session row with ``version``: a counter raised under the session's row lock by
  every save changing the transcript (a store may raise it on every save), or, where
  the store says so (SQLite), by every save that changes rows other than by appending:
  a handle then tells rows appended since it looked by their count (the
  ``stored_length`` of :meth:`SavePlan.start`), since an unchanged version means
  unchanged rows up to the count it knew; ``0``, or no row, means nothing was ever
  saved;
- one row per message: ``position`` (0, 1, ...), the message (however the backend
  keeps it) and ``digest``, the *chain digest* of the transcript up to and including
  that row: ``digest[i] = BLAKE2b-256(digest[i-1] + text[i])``, with ``digest[-1] = b""``,
  over each message's :func:`row_text` (UTF-8): for the common messages of one part a
  form with no JSON escaping, for any other its ``encode_message`` text. Equal digests
  at position ``i`` mean equal transcripts up to ``i``: one row vouches for the whole
  prefix before it.

What a handle remembers (:class:`Remembered`, at most ``cache_sessions`` sessions, least
recently used forgotten first): per session, the version it last wrote or read, the
message objects it held then and their chain digests (all of them after a save; after a
read, the last one alone, which is what a save appending to it chains from), in
buffers the next appending save extends in place (:class:`Known`); for the common
save, what it is about to write, *pending* until its statement has. The version rule: a
remembered entry is trusted only when its version (and, where appends leave it alone,
its count) equals the stored one, read under the lock, and it is not pending; it is
never replaced by an older entry (a slow read finishing after a save), and a read of
what it holds leaves it as it is.

How a save finds what to write (:class:`SavePlan`), with ``p`` the number of leading
messages the new transcript shares with the remembered one (a comparison in C that
tries identity first: agents pass back the very objects they saved or read; for the
common save, the remembered messages plus new ones at the end, one comparison with the
remembered list extended in place, with no copy or slice of the prefix):

0. where appends leave the version alone, a save that only appends to what the handle
   remembers may be tried first as one statement, guarded by the remembered version
   and the uniqueness of positions (:meth:`Remembered.plan_append`); refused, it goes on
   as below, and so do the next saves while another handle writes the session too;

1. the stored version is the remembered one: the stored rows are the remembered
   messages, so nothing is read (after a read that left the digest a save needs
   unknown, the stored digests from that position on);
2. it is not (another handle wrote): read the stored digests from position ``p - 1`` on;
   if the one at ``p - 1`` is the remembered one, the first ``p`` rows are unchanged,
   and the rows after it are what the other handle wrote since, compared digest by
   digest with the new tail. One indexed range read, no work on the prefix;
3. otherwise (the prefix itself was rewritten, or nothing is remembered): read every
   stored digest and compare with the remembered ones, then with the new tail's.

Only messages from the first difference on are encoded and hashed; only rows from
there on are deleted and inserted. A handle that remembers nothing (its first save of
a session it never read) encodes and hashes everything once.

The stores' tables must be written only by the stores: a row changed behind their back
without a version bump goes unseen.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from itertools import repeat
from typing import Final, cast

from storetest.codec import encode_message
from storetest.contract import Message, Text, ToolCall, ToolResult, check_messages

__all__ = [
    "DEFAULT_CACHE_SESSIONS",
    "DIGEST_SIZE",
    "Known",
    "Remembered",
    "SavePlan",
    "chain_digest",
    "chain_digests",
    "check_cache_sessions",
    "common_prefix",
    "encoded",
    "row_text",
]

#: Bytes in one chain digest (BLAKE2b: collision resistant, so equal digests stand for
#: equal prefixes, even against someone who chooses message text to collide).
DIGEST_SIZE: Final = 32

#: Sessions a handle remembers unless told otherwise. Each costs references to its
#: messages (kept alive while remembered) plus 32 bytes of digest per message.
DEFAULT_CACHE_SESSIONS: Final = 128


def row_text(message: Message) -> str:
    """The text a message's row digest covers, one text for each message: one piece of
    text as ``role:text``; one tool call as ``{!role:m:n:`` and then its call id (``m``
    characters), tool name (``n``) and raw arguments; one tool result as ``{?role:m:e:``
    (``e`` 1 for an error), its call id and raw content; any other message its
    :func:`~storetest.codec.encode_message` text, which starts with ``{"``. No role
    starts with ``{``. The common messages are hashed with no JSON escaping: the
    default check's size ladder (such messages up to 1 MiB) took a median of 0.30 s
    against 0.38 s when they were encoded first (``storetest check -k every_field
    --jobs 1 --report r.json``, six seeds, alternated)."""
    content = message.content
    if len(content) == 1:
        part = content[0]
        kind = type(part)
        if kind is Text:
            return message.role + ":" + part.text  # type: ignore[union-attr]
        # No typing.cast here: a Python call, run cold it cost each tool message's text
        # 0.3-1.1 us more (python benchmarks/cold_calls.py).
        if kind is ToolCall:
            call_id, name = part.id, part.name  # type: ignore[union-attr]
            return f"{{!{message.role}:{len(call_id)}:{len(name)}:{call_id}{name}{part.arguments}"  # type: ignore[union-attr]
        if kind is ToolResult:
            call_id = part.call_id  # type: ignore[union-attr]
            return f"{{?{message.role}:{len(call_id)}:{int(part.is_error)}:{call_id}{part.content}"  # type: ignore[union-attr]
    return encode_message(message)


def encoded(message: Message, text: str) -> str:
    """``message``'s :func:`~storetest.codec.encode_message` text, given its
    :func:`row_text` ``text``: that text itself for a message the common forms leave out.
    The PostgreSQL and MySQL stores keep this JSON for every message: for them a common
    message is now made into both texts, where it was encoded once."""
    return text if text.startswith('{"') else encode_message(message)


#: A BLAKE2b hasher of ``DIGEST_SIZE`` bytes that has hashed nothing: copied, it skips
#: the constructor's parameter block (see :func:`chain_digest`). Never updated itself.
_EMPTY_HASHER: Final = hashlib.blake2b(digest_size=DIGEST_SIZE)


def chain_digest(previous: bytes | bytearray, body: str) -> bytes:
    """The digest of a transcript whose previous rows digest to ``previous`` (``b""``
    for none) and whose next row holds ``body``: BLAKE2b of 32 bytes, which CPython
    builds in, rather than OpenSSL's SHA-256, whose machinery costs more run cold, as
    an agent's save runs between its other work (``python benchmarks/floor_ab.py
    --runs 6``: 0.991-0.995 of the floor ratio per run). The size ladder's clause,
    which hashes messages up to 1 MiB, took as long either way (``storetest check -k
    every_field --jobs 1 --seed S``, seeds 1-3: 0.25, 0.25, 0.25 s against 0.25, 0.24,
    0.33 s). A copy of an empty hasher fed twice, rather than a new one fed the two
    joined: the same digest, with no parameter block to build or bytes to join, 2.8-4.4
    us less run cold (``python benchmarks/cold_calls.py``)."""
    hasher = _EMPTY_HASHER.copy()
    hasher.update(previous)
    hasher.update(body.encode("utf-8"))
    return hasher.digest()


def chain_digests(previous: bytes, bodies: Sequence[str]) -> bytes:
    """The chain digests of ``bodies`` following ``previous``, concatenated."""
    out = bytearray()
    for body in bodies:
        previous = chain_digest(previous, body)
        out += previous
    return bytes(out)


def check_cache_sessions(cache_sessions: object) -> int:
    """Return ``cache_sessions`` if it is a usable cache size, else raise ``ValueError``."""
    if type(cache_sessions) is not int or cache_sessions < 0:
        raise ValueError(f"cache_sessions must be an int >= 0, not {cache_sessions!r}")
    return cache_sessions


def common_prefix(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many leading messages ``old`` and ``new`` (each a list or a tuple) share.

    Messages are frozen values and the codec is deterministic, so equal messages encode
    to equal rows: comparing values compares what is stored. Sequence equality runs in
    C and tries identity before ``__eq__``, so a caller passing back the objects it saved
    or read costs a pointer comparison per message.
    """
    n = min(len(old), len(new))
    # Slice only the longer side: at turn 2,000 each copy costs as much as the compare.
    a = old if n == len(old) else old[:n]
    b = new if n == len(new) else new[:n]
    if type(a) is not type(b):
        a, b = tuple(a), tuple(b)  # a list never equals a tuple
    if a == b:
        return n
    i = 0
    while i < n and old[i] == new[i]:
        i += 1
    return i


class Known:
    """What a handle knows a session held at ``version``: its first ``length`` messages
    and the chain digests of those from position ``first`` on (``DIGEST_SIZE`` bytes
    per message).

    A save knows every digest (``first`` is 0). A read may fetch only the last one
    (``first`` is ``length - 1``): the next save appending to what was read chains from
    it, and a handle that wrote since is recognised by it; fetching all of them made
    every read fetch a 32-byte column of every row and join them.

    The messages (a list or a tuple) and the digests (``bytes`` or a ``bytearray``) are
    buffers this module owns and never hands out. The next save appending to them
    extends them in place (:func:`_extend`) rather than copying them: at turn 2,000 a
    copy touched every message object (a reference count each) and 64 KB of digests,
    and from memory that other work has evicted that cost more than the save's own
    SQL. So a buffer may run past ``length``; nothing below any ``length`` handed out
    ever changes.
    """

    __slots__ = ("_digests", "_messages", "first", "length", "pending", "shared", "version")

    def __init__(
        self, version: int, messages: Sequence[Message], digests: bytes | bytearray, first: int = 0,
        length: int | None = None, shared: bool = False, pending: bool = False,
    ) -> None:
        self.version = version
        self._messages = messages
        self._digests = digests
        self.first = first
        self.length = len(messages) if length is None else length
        #: Whether the save that learned this found that another handle had written
        #: since this one last did: the next save expects the same (see
        #: :meth:`Remembered.plan_append`).
        self.shared = shared
        #: Whether its rows may not be stored: remembered just before the statement
        #: that writes them (:meth:`Remembered.plan_append`), cleared once it did. A
        #: pending entry is never trusted by its version and count, which another
        #: handle's rows could match after the statement failed: a plan made from it
        #: checks the stored digests, and no append is planned from it.
        self.pending = pending

    @property
    def messages(self) -> Sequence[Message]:
        """The ``length`` messages: a tuple as it is, a list buffer always copied (one
        slice, which nothing below ``length`` can change under). Never the list itself,
        which another thread's save may extend while the caller walks it: a comparison
        that read its length then ran past ``length``, into messages never stored."""
        m = self._messages
        return m if type(m) is tuple and len(m) == self.length else m[: self.length]

    @property
    def digests(self) -> bytes:
        """The chain digests from :attr:`first` to ``length - 1``, concatenated."""
        return bytes(self._digests[: (self.length - self.first) * DIGEST_SIZE])

    def digest_at(self, position: int) -> bytes | None:
        """The chain digest at ``position``, or ``None`` if this handle does not know it."""
        if position < self.first:
            return None
        return bytes(self._digests[(position - self.first) * DIGEST_SIZE : (position - self.first + 1) * DIGEST_SIZE])


#: Guards every in-place extension of a remembered buffer: the check that nobody
#: extended it yet and the extension are one step.
_EXTENDING = threading.Lock()


def _extend(buffer: list[Message] | bytearray, end: int, more: Sequence[Message] | bytes) -> bool:
    """Append ``more`` to ``buffer`` if it ends at ``end`` (no other save extended it
    past what it was remembered with); whether it did."""
    with _EXTENDING:
        if len(buffer) != end:
            return False
        buffer += more  # type: ignore[operator]
        return True


def _grown(buffer: bytes | bytearray, end: int, more: bytes) -> bytearray:
    """The digests ``buffer[:end] + more``: ``buffer`` itself, extended in place, if it is
    a bytearray nobody extended past ``end``; else a copy, which later saves extend."""
    if type(buffer) is bytearray and _extend(buffer, end, more):
        return buffer
    grown = bytearray(buffer[:end])
    grown += more
    return grown


def _extended_to(old: list[Message], n: int, given: list[Message]) -> bool:
    """Extend ``old`` (a remembered list, ``n`` long) in place by ``given[n:]`` and say
    whether it then equals ``given`` (in C, identity first). ``False`` leaves it ``n``
    long: another save extended it first, or ``given`` differs in its first ``n``."""
    if not _extend(old, n, given[n:]):
        return False
    if old == given:
        return True
    del old[n:]  # nobody else extends it while it runs past n
    return False


def _same_objects(old: Sequence[Message], given: Sequence[Message], n: int) -> bool:
    """Whether ``given``, equal to ``old`` in its first ``n``, holds the same objects
    there: three probes decide, and a wrong guess costs speed, never correctness."""
    return not n or (old[0] is given[0] and old[n // 2] is given[n // 2] and old[n - 1] is given[n - 1])


class SavePlan:
    """What one save must do, worked out in two steps: :meth:`Remembered.prepare`
    checks the new transcript and compares it with what the handle remembers, before
    any database work; :meth:`start` takes the stored version, read under the session's
    lock, and asks for stored digests if it needs them. The backend runs::

        plan = remembered.prepare(key, messages)      # raises TypeError, touches nothing
        <begin; lock the session row and read its version>
        plan.start(stored_version)
        while plan.fetch_from is not None:
            plan.resolve(<(position, digest) rows with position >= plan.fetch_from,
                          ordered by position>)
        if plan.delete: <delete rows with position >= plan.keep>
        <insert plan.rows: (position, digest, row_text)>
        if plan.changed: <raise the version>

    and, once committed, ``remembered.learn(key, plan.known(new_version))``. A
    transaction retried after a deadlock calls :meth:`start` again.
    """

    __slots__ = ("_digests", "_encoded", "_known", "_prefix", "_same_version", "_shared", "changed", "delete",
                 "fetch_from", "first", "keep", "length", "new", "rows")

    def __init__(self, new: Sequence[Message], known: Known | None, prefix: int, length: int | None = None) -> None:
        #: The transcript to save: ``new[:length]`` (a remembered buffer may run on).
        self.new = new
        self.length = len(new) if length is None else length
        self._known = known
        #: How many leading messages of ``new`` equal the remembered ones.
        self._prefix = prefix
        #: Rows from here on must be fetched and passed to :meth:`resolve`; ``None``
        #: once the plan is complete.
        self.fetch_from: int | None = None
        #: Rows ``[0, keep)`` stay as they are.
        self.keep = 0
        #: Whether stored rows at ``keep`` and after must be deleted.
        self.delete = False
        #: ``(position, digest, row_text)`` of every row to insert.
        self.rows: list[tuple[int, bytes, str]] = []
        #: Whether the save changes the stored transcript (and so its version).
        self.changed = False
        #: The chain digests of ``new`` from position :attr:`first` on, concatenated
        #: (a buffer that may run on, as :class:`Known`'s).
        self._digests: bytes | bytearray = b""
        self.first = 0
        #: Whether the stored version is the remembered one (the stored rows are the
        #: remembered messages), decided by :meth:`start`.
        self._same_version = False
        #: Whether another handle wrote since this one remembered, decided by :meth:`start`.
        self._shared = False
        #: ``(keep, bodies, digests)`` of the tail last encoded: a plan started again
        #: (a retried transaction, a version that moved) that keeps as many rows
        #: encodes nothing twice.
        self._encoded: tuple[int, list[str], bytes] | None = None

    def start(self, stored_version: int | None, stored_length: int | None = None) -> None:
        """Take the session's stored version, read under its lock (``None`` or ``0``:
        nothing was ever saved), and, from a store whose appends leave the version as
        it is, the number of stored rows. Afterwards the plan is complete, or
        :attr:`fetch_from` says which stored digests it needs."""
        known = self._known
        self._same_version = False
        self._shared = known is not None and (stored_version, stored_length) not in (
            (known.version, None), (known.version, known.length))
        if not stored_version:
            # No session row, or one that add_steer made: nothing has been saved.
            self._finish(0, ())
        elif known is None:
            self.fetch_from = 0
        elif not known.pending and stored_version == known.version and stored_length in (None, known.length):
            p = self._prefix
            if known.first > max(p - 1, 0):
                # The stored rows are the remembered messages, but this handle read them
                # without the digests this save needs: fetch them from the one new rows
                # chain from.
                self._same_version = True
                self.fetch_from = max(p - 1, 0)
                return
            stored_after = [
                (position, cast(bytes, known.digest_at(position))) for position in range(p, known.length)
            ]
            self._finish(p, stored_after)
        else:
            # Another handle wrote (or appended), or this handle's own append may have
            # failed (a pending entry): the row before the shared prefix vouches for it.
            self.fetch_from = max(self._prefix - 1, 0)

    def reuse(self, rows: Sequence[tuple[int, bytes, str]]) -> None:
        """Take rows :meth:`Remembered.plan_append` encoded for this transcript, whose
        one statement was refused: a plan that keeps as many rows encodes nothing twice."""
        if rows:
            self._encoded = (rows[0][0], [row[2] for row in rows], b"".join([row[1] for row in rows]))

    def resolve(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """Take the stored ``(position, digest)`` rows asked for by :attr:`fetch_from`.
        Afterwards :attr:`fetch_from` is ``None``, or ``0`` when every row is needed."""
        start = self.fetch_from
        if start is None:
            raise RuntimeError("this save plan is complete; nothing more to resolve")
        known = self._known
        if start > 0:
            assert known is not None
            if rows and rows[0][0] == start and (
                self._same_version or bytes(rows[0][1]) == known.digest_at(start)
            ):
                # Chain digests: this one row proves rows 0..start unchanged (or the
                # version did, and the row is the digest to chain from).
                self._finish(start + 1, rows[1:], bytes(rows[0][1]))
            else:
                self.fetch_from = 0  # the prefix itself changed: compare every row
            return
        keep = 0
        if self._same_version:
            # The stored rows are the remembered messages: the first ``prefix`` stay.
            keep = min(self._prefix, len(rows))
            self._finish(keep, rows[keep:], bytes(rows[keep - 1][1]) if keep else None)
            return
        if known is not None:
            # Bounded by the prefix the new transcript shares with the remembered one,
            # whose digests are known without hashing anything.
            limit = min(self._prefix, len(rows))
            while (
                keep < limit and rows[keep][0] == keep and bytes(rows[keep][1]) == known.digest_at(keep)
            ):
                keep += 1
        self._finish(keep, rows[keep:])

    def _finish(self, keep: int, stored_after: Sequence[tuple[int, bytes]], anchor: bytes | None = None) -> None:
        """Rows ``[0, keep)`` are known to equal ``new[:keep]``; ``stored_after`` are the
        stored rows from ``keep`` on; ``anchor``, the stored digest at ``keep - 1`` when
        it was fetched. Encode and hash only ``new[keep:]``."""
        self.fetch_from = None
        known = self._known
        remembered = known is not None and keep and known.first <= keep - 1
        if remembered:
            assert known is not None
            self.first = known.first
            last = cast(bytes, known.digest_at(keep - 1))
        elif keep:
            assert anchor is not None  # keep > 0 without the digest before it comes only from a fetch
            self.first, last = keep - 1, anchor
        else:
            self.first, last = 0, b""
        if self._encoded is not None and self._encoded[0] == keep:
            bodies, tail_digests = self._encoded[1], self._encoded[2]
        else:
            bodies = [row_text(m) for m in self.new[keep : self.length]]
            tail_digests = chain_digests(last, bodies)
            self._encoded = (keep, bodies, tail_digests)
        if remembered:
            assert known is not None
            self._digests = _grown(known._digests, (keep - known.first) * DIGEST_SIZE, tail_digests)
        else:
            self._digests = bytearray(last + tail_digests) if keep else bytearray(tail_digests)
        # Rows another handle wrote may equal the new tail (two handles saving the same
        # growing transcript): keep those too.
        matched = 0
        for position, digest in stored_after:
            if (
                matched >= len(bodies)
                or position != keep + matched
                or bytes(digest) != tail_digests[matched * DIGEST_SIZE : (matched + 1) * DIGEST_SIZE]
            ):
                break
            matched += 1
        self.keep = keep + matched
        # A gap in positions ends the match like a changed row does; the delete from
        # ``keep`` on removes whatever follows.
        self.delete = len(stored_after) > matched
        self.rows = [
            (keep + i, tail_digests[i * DIGEST_SIZE : (i + 1) * DIGEST_SIZE], bodies[i])
            for i in range(matched, len(bodies))
        ]
        self.changed = self.delete or bool(self.rows)

    def digest_at(self, position: int) -> bytes:
        """The chain digest of ``new`` at ``position`` (``b""`` for ``-1``), once complete;
        ``position`` is at least ``keep - 1``."""
        if position < 0:
            return b""
        if position < self.first:
            raise ValueError(f"the digest at {position} is not known (known from {self.first})")
        return bytes(self._digests[(position - self.first) * DIGEST_SIZE : (position - self.first + 1) * DIGEST_SIZE])

    def known(self, version: int) -> Known:
        """What the store holds once this plan is committed at ``version``."""
        if self.fetch_from is not None:
            raise RuntimeError("this save plan is not complete")
        return Known(version, self.new, self._digests, self.first, self.length, self._shared)


class Remembered:
    """A handle's memory of recent sessions, shared by its threads (a lock guards it).

    :param cache_sessions: how many sessions to remember; ``0`` remembers nothing, so
        every save of a stored session compares all stored digests.
    :raises ValueError: ``cache_sessions`` is not an int >= 0.
    """

    def __init__(self, cache_sessions: int = DEFAULT_CACHE_SESSIONS) -> None:
        self.cache_sessions = check_cache_sessions(cache_sessions)
        self._entries: OrderedDict[Hashable, Known] = OrderedDict()
        self._lock = threading.Lock()

    def wants_read(self, key: Hashable, version: int, length: int) -> bool:
        """Whether a read of ``key``'s session at ``version``, ``length`` messages,
        would teach this handle anything: nothing that new is remembered (see
        :meth:`learn`). A read of what is remembered already keeps the entry it has (the
        objects the application was handed or saved, digests from a save), so
        re-reading an unchanged session makes no copy, joins nothing and frees nothing
        of the handle's."""
        if not self.cache_sessions:
            return False
        with self._lock:
            current = self._entries.get(key)
            if current is not None:
                self._entries.move_to_end(key)
            return current is None or (current.version, current.length) < (version, length)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Known | None:
        with self._lock:
            known = self._entries.get(key)
            if known is not None:
                self._entries.move_to_end(key)
            return known

    def prepare(self, key: Hashable, messages: object) -> SavePlan:
        """Check ``messages`` as :func:`~storetest.contract.check_messages` does and
        start a :class:`SavePlan` for saving them to ``key``'s session.

        Messages equal to the remembered prefix are not type-checked again: they equal
        messages that were, and the comparison that finds the prefix (identity first,
        in C) is needed anyway, where an ``isinstance`` call per message is not.

        :raises TypeError: ``messages`` is not a sequence of ``Message``.
        """
        known = self.get(key)
        if known is None or not (type(messages) is list or type(messages) is tuple):
            checked = check_messages(messages)
            return SavePlan(checked, known, common_prefix(known.messages, checked) if known else 0)
        given = cast("list[Message] | tuple[Message, ...]", messages)  # items checked below
        n = known.length
        new: Sequence[Message] | None = None
        length = len(given)
        prefix = 0
        if length >= n:
            # The common save appends to what was saved or read last: the remembered
            # list, extended in place by the new messages, is compared with the one
            # given, in C, identity first, and becomes the snapshot to remember. A copy
            # (or a slice of the prefix to compare) would touch every message at turn
            # 2,000.
            old = known._messages
            if type(old) is list and type(given) is list and _extended_to(old, n, given):
                prefix = n
                # Equal, but perhaps not the same objects (a replica that read the
                # session and saves the application's own list): keep the caller's, so
                # the next comparison is one of identities again.
                if _same_objects(old, given, n):
                    new = old
                else:
                    del old[n:]
                    new = given.copy()
                    length = len(new)
                    if new[:n] != old:
                        # Changed by another thread since the comparison: the copy is
                        # what gets saved and remembered; find its own prefix.
                        prefix = common_prefix(old, new)
            else:
                remembered = known.messages
                candidate: Sequence[Message]
                if isinstance(given, list):
                    candidate = (remembered if type(remembered) is list else list(remembered)) + given[n:]
                else:
                    candidate = (remembered if type(remembered) is tuple else tuple(remembered)) + given[n:]
                if candidate == given:
                    prefix = n
                    new = given if isinstance(given, tuple) else candidate
        if new is None:
            new = given.copy() if isinstance(given, list) else given
            length = len(new)
            prefix = common_prefix(known.messages, new)
        if not all(map(isinstance, new[prefix:length], repeat(Message))):
            try:
                check_messages(new[:length])  # raises, naming the first item that is not a Message
            finally:
                if new is known._messages:
                    del cast("list[Message]", new)[n:]  # extended in place above: leave it as it was
        return SavePlan(new, known, prefix, length)

    def plan_append(
        self, key: Hashable, messages: object
    ) -> tuple[Known, Known, list[tuple[int, bytes, str]]] | None:
        """The common save planned in one step, for a store whose appends leave the
        version alone: if ``messages`` is a list holding the very messages this handle
        remembers for ``key`` and new ones after them, and no other handle was seen
        writing the session, ``(known, grown, rows)``: the entry remembered now, what to
        remember once the new rows are written, and the ``(position, chain digest,
        row_text)`` rows, which append to the rows stored at the remembered version.
        Otherwise ``None``, and the store saves through :meth:`prepare` as usual.

        ``grown`` is pending (:attr:`Known.pending`). The store then, under its lock,
        puts it in place of ``known`` with :meth:`swap` (refused if ``known`` is no
        longer what is remembered: a save or a read learned since, or it was forgotten;
        save as usual), writes the rows in one statement guarded by that version and by
        the uniqueness of positions (nobody appended since), and then marks ``grown``
        written, or, if the statement is refused, swaps ``known`` back and saves as
        usual; on an error or an interrupt it forgets the session (an interrupt inside
        :meth:`swap` may leave ``grown`` remembered, pending: never trusted, and
        replaced by the next save that learns). Remembered before the
        statement rather than after its fsync, this is done while what it touches is
        still in the CPU's caches; pending, it is never trusted by its version
        meanwhile, nor planned from. A handle whose save found another's rows skips
        this until a save finds none: the statement would be refused more often than
        not (two replicas taking turns).

        What :meth:`prepare` and :meth:`SavePlan.start` would do for such a save, with
        no plan object: this is the one save of every agent turn."""
        known = self._entries.get(key)  # one dict read; learn() keeps it up to date
        if known is None or known.pending or known.shared or not known.version or type(messages) is not list:
            return None
        n = known.length
        first = known.first
        if len(messages) <= n or first >= n:
            return None
        # The common save appends one message (an agent's turn): no slice, no iterator
        # and no join for it (benchmarks/floor_ab.py: run cold between an agent's other
        # work, they are measurable against the floor).
        one = len(messages) == n + 1
        if one:
            message = messages[n]  # read once: the object checked is the object kept
            if not isinstance(message, Message):
                return None
        else:
            added = messages[n:]
            if not all(map(isinstance, added, repeat(Message))):
                return None
        old = known._messages
        if type(old) is not list:
            old = list(old[:n])  # a tuple remembered: a list once, extended from then on
        if not _extend(old, n, (message,) if one else added):
            return None  # another save of this handle's extended it first
        if not (old == messages and _same_objects(old, messages, n)):
            # An edit, or equal copies: prepare's. Nobody else extends a buffer that
            # runs past what any entry covers, so this undoes exactly the extension.
            del old[n:]
            return None
        end = (n - first) * DIGEST_SIZE
        previous = known._digests[end - DIGEST_SIZE : end]
        if one:
            text = row_text(message)
            previous = chain_digest(previous, text)
            rows = [(n, previous, text)]
            more = previous
        else:
            rows = []
            for position, message in enumerate(added, n):
                text = row_text(message)
                previous = chain_digest(previous, text)
                rows.append((position, previous, text))
            more = b"".join([row[1] for row in rows])
        grown = Known(known.version, old, _grown(known._digests, end, more), first, len(old), pending=True)
        return known, grown, rows

    def swap(self, key: Hashable, current: Known, new: Known) -> bool:
        """Remember ``new`` for ``key`` if ``current`` is what is remembered; whether it
        did. The store calls it under its own lock, around the one statement of a
        :meth:`plan_append` (see there): to install a pending entry, and to put back
        the one it replaced when the statement is refused."""
        with self._lock:
            if self._entries.get(key) is not current:
                return False
            self._entries[key] = new
            self._entries.move_to_end(key)
            return True

    def learn(self, key: Hashable, known: Known) -> None:
        """Remember ``known``, unless something newer is remembered already: a higher
        version, or the same one with more messages (appended by a store whose appends
        leave the version as it is)."""
        if self.cache_sessions == 0:
            return
        with self._lock:
            current = self._entries.get(key)
            if current is None or (current.version, current.length) <= (known.version, known.length):
                self._entries[key] = known
            self._entries.move_to_end(key)
            while len(self._entries) > self.cache_sessions:
                self._entries.popitem(last=False)

    def learn_read(
        self, key: Hashable, version: int, messages: Sequence[Message], digests: Iterable[bytes], first: int = 0
    ) -> None:
        """Remember what a read found: ``messages`` (a list or tuple the caller will
        never change or hand out) and their stored ``digests`` from position ``first``
        on (the last one alone will do: see :class:`Known`) at ``version``, all from one
        snapshot (a caller that asked :meth:`wants_read` first may skip it)."""
        if self.cache_sessions:
            self.learn(key, Known(version, messages, b"".join(digests), first))

    def forget(self, key: Hashable) -> None:
        """Drop what is remembered (after a failed save, which may have changed it)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
