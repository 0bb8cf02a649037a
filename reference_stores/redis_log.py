"""The Redis log store: the application's ``redis.asyncio`` client (``Redis`` or
``RedisCluster``), two keys per session, and one Lua script per append.

How it keeps the log contract on Redis:

- *Multi-key atomicity holds only inside one hash slot* (Redis Cluster refuses a script
  whose keys span slots, ``CROSSSLOT``): both keys of a session carry the same hash
  tag, the session id's UTF-8 bytes in hex (:func:`session_keys`), so no id can end
  the tag early (``}x``, ``{a}``) and no two ids share a key (``x`` and ``x:log``
  are two sessions).
- *Checks before the write are a race*: an append is one script, which Redis runs with
  nothing else in between. The script looks up the batch's ids and parents in the
  session's id hash (``HEXISTS``, one probe each), refuses the batch or pushes it
  whole, so the check is where the write is. When it refuses, it returns which of the
  batch's ids the session has, and :func:`~storetest.entries.check_batch` turns that
  into the ``ValueError`` every log store raises. ``create`` is the same script,
  which first refuses a session whose list exists.
- *Appends must not cost O(log length)*: ``HEXISTS``, ``HSET`` and ``RPUSH`` are O(1)
  per entry; nothing reads the log.
- *Ids, times and payloads kept exactly*: each entry is one list element, a JSON array
  ``[id, parent, microseconds, utc offset, kind, payload]`` made with
  :mod:`reference_stores._entry_codec`; ids go to the hash as their UTF-8 bytes (Redis
  strings are binary, NUL included).
- *A read sees whole batches*: ``LRANGE 0 -1`` is one command, and a batch one script.

Client settings (:func:`check_client`): replies must be bytes (``decode_responses``
off), and the client must not retry a command on a lost connection (redis-py retries by
default): a retried script whose first run landed would refuse its own batch as a
duplicate. A connection lost after the script was sent raises
:class:`~storetest.contract.OutcomeUnknown`; an append that raised it and is retried
either lands or raises ``ValueError`` because its ids are already there, which says
the first one landed.

Bounded calls: every method sends one command (two more, ``SCRIPT LOAD`` and the
script again, the first time a server has not seen the script), and redis-py waits
``socket_timeout`` seconds for each reply and ``socket_connect_timeout`` for a new
connection, so a stalled connection ends a call within 3 x (``socket_connect_timeout``
+ ``socket_timeout``). The store warns at construction when either is ``None``
(wait forever).

Durability is Redis's, not the store's: an acknowledged append is in the server's
memory; with ``appendonly yes`` and ``appendfsync always`` it is on disk before the
reply and survives the server's crash; with ``appendfsync everysec`` (Redis's default
when AOF is on) a power cut or OS crash can lose about the last second (a crash of the
server process alone loses nothing written to the AOF file); with persistence off
(or RDB snapshots only) a crash loses everything since the last snapshot.
``tests/test_crash_redis.py`` kills the server with SIGKILL under ``always`` and under
no persistence. Replicas (``WAIT``, failover) are not promised anything: no test
here shows what they keep.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any, Final, NoReturn

import redis.asyncio as aioredis
import redis.exceptions

from reference_stores._entry_codec import decode_payload, decode_time, encode_payload, encode_time
from storetest.contract import OutcomeUnknown, StoreError, check_session_id
from storetest.entries import Entry, check_batch, check_create, check_entries

__all__ = ["DEFAULT_PREFIX", "RedisLogStore", "check_client", "session_keys"]

#: What every key the stores write begins with, unless told otherwise.
DEFAULT_PREFIX: Final = "storetest:"

# KEYS: the entry list, the id hash. ARGV: "append" or "create", n, then n ids, n
# parents ("" for none: an entry id is never empty), n encoded entries. Returns 1
# (written), 0 (create: the session has entries), or a list of the batch's ids and
# parents the session has (refused; check_batch says why).
_APPEND: Final = """
local n = tonumber(ARGV[2])
if ARGV[1] == 'create' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local seen, found, refused = {}, {}, false
for i = 1, n do
  local id, parent = ARGV[2 + i], ARGV[2 + n + i]
  if redis.call('HEXISTS', KEYS[2], id) == 1 then
    found[#found + 1] = id
    refused = true
  elseif seen[id] then
    refused = true
  end
  if parent ~= '' and not seen[parent] then
    if redis.call('HEXISTS', KEYS[2], parent) == 1 then
      found[#found + 1] = parent
    else
      refused = true
    end
  end
  seen[id] = true
end
if refused then
  found[#found + 1] = ''  -- never an empty reply: that would read as nil
  return found
end
for i = 1, n, 1000 do
  local last = math.min(n, i + 999)
  local fields = {}
  for j = i, last do
    fields[#fields + 1] = ARGV[2 + j]
    fields[#fields + 1] = '1'
  end
  redis.call('HSET', KEYS[2], unpack(fields))
  redis.call('RPUSH', KEYS[1], unpack(ARGV, 2 + 2 * n + i, 2 + 2 * n + last))
end
return 1
"""

# What the driver raises when the server, the network or the client fails.
_BACKEND_ERRORS: Final = (redis.exceptions.RedisError, OSError)
# Raised when a connection is lost or a reply is late: the command may have run.
_LOST: Final = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def session_keys(prefix: str, session: str, *names: str) -> list[bytes]:
    """The keys ``names`` of ``session``: ``<prefix>{<hex of the id's UTF-8>}:<name>``.

    Hex holds no brace, so the hash tag is exactly the id and every key of one session
    is in one slot; and it is injective, so two sessions never share a key.
    """
    tag = session.encode("utf-8").hex()
    return [f"{prefix}{{{tag}}}:{name}".encode() for name in names]


def check_prefix(prefix: object) -> str:
    """``prefix`` if the stores can put it in front of their keys.

    :raises TypeError: it is not a ``str``.
    :raises ValueError: it holds a brace (it would become the hash tag: every session
        in one slot, or a tag cut short).
    """
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be str, not {type(prefix).__name__}")
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"prefix {prefix!r} holds a brace; the stores put the hash tag in the key themselves")
    return prefix


def _connection_settings(client: Any) -> dict[str, Any]:
    pool = getattr(client, "connection_pool", None)
    if pool is not None:  # Redis
        return dict(pool.connection_kwargs)
    return dict(client.get_connection_kwargs())  # RedisCluster


def check_client(client: object, store: str) -> None:
    """Refuse a client the Redis stores cannot work with, naming the fix; warn when it
    may wait forever.

    :raises TypeError: not a ``redis.asyncio`` ``Redis`` or ``RedisCluster``.
    :raises ValueError: ``decode_responses=True`` (the stores need bytes back), or a
        client that retries commands on a lost connection (a retried write can land
        twice).
    """
    if not isinstance(client, aioredis.Redis | aioredis.RedisCluster):
        raise TypeError(
            f"{store} needs a redis.asyncio.Redis or RedisCluster client, not {type(client).__name__}"
        )
    settings = _connection_settings(client)
    if settings.get("decode_responses"):
        raise ValueError(
            f"{store} needs a client with decode_responses=False: it stores bytes and decodes them itself"
        )
    retry = client.retry if isinstance(client, aioredis.RedisCluster) else settings.get("retry")
    if retry is not None and retry.get_retries() > 0:
        raise ValueError(
            f"{store} needs a client that does not retry commands (it retries {retry.get_retries()} times): "
            "a write whose reply was lost would be sent again and could land twice. Pass "
            "retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0); the store raises "
            "OutcomeUnknown where a retry would have guessed"
        )
    unset = [name for name in ("socket_timeout", "socket_connect_timeout") if settings.get(name) is None]
    if unset:
        warnings.warn(
            f"{store}: the client's {' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} None, so a "
            "stalled connection blocks a call forever; set both (redis-py's default is 5 seconds)",
            RuntimeWarning,
            stacklevel=3,
        )


def fail(operation: str, session: str, exc: BaseException) -> NoReturn:
    """Raise the :class:`StoreError` for ``exc``, naming the operation and the session."""
    raise StoreError(f"{operation} session {session!r} failed: {_describe(exc)}") from exc


def outcome_unknown(operation: str, session: str, exc: BaseException, steers: Sequence[str] = ()) -> NoReturn:
    """Raise :class:`OutcomeUnknown`: the write was sent and its reply never came."""
    raise OutcomeUnknown(
        f"{operation} session {session!r} may or may not have taken effect: the connection to Redis "
        f"was lost after the command was sent ({_describe(exc)})",
        steers=steers,
    ) from exc


def write_failed(operation: str, session: str, exc: BaseException, steers: Sequence[str] = ()) -> NoReturn:
    """Raise for a write that failed: :class:`OutcomeUnknown` when the connection was lost
    once the command could have been sent, else :class:`StoreError`."""
    if isinstance(exc, _LOST) and not _before_sending(exc):
        outcome_unknown(operation, session, exc, steers)
    fail(operation, session, exc)


def _before_sending(exc: BaseException) -> bool:
    # redis-py's words for a connection that never opened: nothing was sent on it.
    text = str(exc)
    return "connecting to" in text or "Timeout connecting" in text


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _encode(entry: Entry) -> bytes:
    us, offset = encode_time(entry.created_at)
    record = [entry.id, entry.parent_id, us, offset, entry.kind, encode_payload(entry)]
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _decode(raw: bytes) -> Entry:
    entry_id, parent, us, offset, kind, payload = json.loads(raw)
    return Entry(entry_id, parent, decode_time(us, offset), kind, decode_payload(kind, payload))


class RedisLogStore:
    """A log store keeping each session's entries in a Redis list, its ids in a hash.

    Several stores on the same server or cluster, with the same prefix, are replicas.

    :param client: a ``redis.asyncio.Redis`` or ``RedisCluster``, created on the event
        loop the store will be used from, with ``decode_responses=False`` and no retries
        (see :func:`check_client`). The store never closes it.
    :param prefix: what every key begins with (no braces).
    :raises TypeError, ValueError: a client or prefix it cannot work with.

    Methods raise ``TypeError``/``ValueError`` for bad arguments (``ValueError`` for a
    batch :func:`~storetest.entries.check_batch` refuses, with nothing written),
    :class:`~storetest.contract.StoreError` when Redis fails, and its subclass
    :class:`~storetest.contract.OutcomeUnknown` when the connection was lost after an
    append or create was sent.
    """

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX) -> None:
        check_client(client, "RedisLogStore")
        self._client = client
        self._prefix = check_prefix(prefix)
        self._script = client.register_script(_APPEND)

    def __repr__(self) -> str:
        return f"RedisLogStore({self._client!r}, prefix={self._prefix!r})"

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        """Append a batch with one script, creating the session if new.

        :raises ValueError: a duplicate id or an unknown parent (nothing written).
        """
        session = check_session_id(session)
        batch = check_entries(entries)
        if batch:
            await self._write("append", "append to", session, batch)

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        """Append a non-empty batch only if the session has no entries.

        :returns: ``True`` if written, ``False`` if the session already had entries.
        """
        session = check_session_id(session)
        batch = check_create(session, entries)
        return await self._write("create", "create of", session, batch)

    async def entries(self, session: str) -> list[Entry]:
        """Every entry in append order; ``[]`` for a session never used."""
        session = check_session_id(session)
        (log,) = session_keys(self._prefix, session, "log")
        try:
            rows = await self._client.lrange(log, 0, -1)
        except _BACKEND_ERRORS as exc:
            fail("read of", session, exc)
        try:
            return [_decode(row) for row in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"read of session {session!r} failed: a stored entry is corrupt ({exc})") from exc

    async def _write(self, mode: str, operation: str, session: str, batch: Sequence[Entry]) -> bool:
        keys = session_keys(self._prefix, session, "log", "log-ids")
        ids = [e.id.encode("utf-8") for e in batch]
        parents = [b"" if e.parent_id is None else e.parent_id.encode("utf-8") for e in batch]
        try:
            got = await self._script(keys, [mode, len(batch), *ids, *parents, *map(_encode, batch)])
        except _BACKEND_ERRORS as exc:
            write_failed(operation, session, exc)
        if isinstance(got, list):
            found = {raw.decode("utf-8") for raw in got if raw}
            check_batch(session, batch, found)  # raises the ValueError the script decided on
            raise StoreError(f"{operation} session {session!r} failed: the script refused a batch check_batch accepts")
        return bool(got)
