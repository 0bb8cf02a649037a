"""The Redis log store: the application's ``redis.asyncio`` client (``Redis`` or
``RedisCluster``), two keys per session, and one Lua script per append.

How it keeps the log contract on Redis:

- *Multi-key atomicity holds only inside one hash slot* (Redis Cluster refuses a script
  whose keys span slots, ``CROSSSLOT``): the keys are the transcript store's
  (:func:`reference_stores.redis.session_key`, the escaped id inside the hash tag),
  kinds ``e`` (the entries, a list) and ``i`` (their ids, a hash): every key of a
  session in one slot, no two sessions sharing a key, and a session's log apart from
  its transcript and steers.
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

Client settings are the transcript store's (:class:`reference_stores.redis.RedisStore`):
replies must be bytes (``decode_responses`` off), and the client must not retry a
command on a lost connection (``Redis()`` and ``RedisCluster`` do by default; the store
refuses one that does): a retried script whose first run landed would refuse its own
batch as a duplicate. On a cluster client it learns the cluster's layout before a
command, bounded and shared, as the transcript store does. A
connection lost after the script was sent raises
:class:`~storetest.contract.OutcomeUnknown`; an append that raised it and is retried
either lands or raises ``ValueError`` because its ids are already there, which says
the first one landed (``tests/test_faults_redis.py`` retries every such append).

Bounded calls and durability: as the transcript store's (its module docstring).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import redis.asyncio
import redis.exceptions

from reference_stores._entry_codec import decode_payload, decode_time, encode_payload, encode_time
from reference_stores.redis import (
    _BACKEND_ERRORS,
    _LOST,
    DEFAULT_PREFIX,
    _Calls,
    _check_client,
    _check_prefix,
    _damaged,
    _damaged_key,
    _fail,
    _outcome_unknown,
    session_key,
)
from storetest.contract import StoreError, check_session_id
from storetest.entries import Entry, check_batch, check_create, check_entries

__all__ = ["DEFAULT_PREFIX", "RedisLogStore"]

# KEYS: the entry list, the id hash. ARGV: "append" or "create", n, then n ids, n
# parents ("" for none: an entry id is never empty), n encoded entries. Returns 1
# (written), 0 (create: the session has entries), or a list of the batch's ids and
# parents the session has (refused; check_batch says why).
_APPEND: Final = """
for i, wanted in ipairs({'list', 'hash'}) do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= wanted then
    return redis.error_reply('DAMAGED ' .. i .. ' holds a ' .. kind .. ', not a ' .. wanted)
  end
end
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
        (refused otherwise, as the transcript store refuses it). The store never closes it.
    :param prefix: what every key begins with (no braces).
    :raises TypeError, ValueError: a client or prefix it cannot work with.

    Methods raise ``TypeError``/``ValueError`` for bad arguments (``ValueError`` for a
    batch :func:`~storetest.entries.check_batch` refuses, with nothing written),
    :class:`~storetest.contract.StoreError` when Redis fails, and its subclass
    :class:`~storetest.contract.OutcomeUnknown` when the connection was lost after an
    append or create was sent.
    """

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX) -> None:
        _check_client(client, "RedisLogStore")
        self._client = client
        self._prefix = _check_prefix(prefix)
        self._script = client.register_script(_APPEND)
        self._calls = _Calls(client)

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
        key = session_key(self._prefix, session, "e")
        try:
            rows = await self._calls.run(self._calls.deadline(), lambda: self._client.lrange(key, 0, -1))
        except redis.exceptions.ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                _damaged_key("read of", session, key, f"is not a list ({exc})", exc)
            _fail("read of", session, exc)
        except _BACKEND_ERRORS as exc:
            _fail("read of", session, exc)
        entries = []
        for i, row in enumerate(rows):
            try:
                entries.append(_decode(row))
            except (ValueError, KeyError, TypeError, ArithmeticError, RecursionError) as exc:
                _damaged_key("read of", session, key, f"holds an element ({i + 1} of {len(rows)}) that is not an "
                             f"entry ({type(exc).__name__}: {exc})", exc)
        return entries

    async def _write(self, mode: str, operation: str, session: str, batch: Sequence[Entry]) -> bool:
        keys = [session_key(self._prefix, session, kind) for kind in ("e", "i")]
        ids = [e.id.encode("utf-8") for e in batch]
        parents = [b"" if e.parent_id is None else e.parent_id.encode("utf-8") for e in batch]
        args = [mode, len(batch), *ids, *parents, *map(_encode, batch)]
        try:
            got = await self._calls.script(self._calls.deadline(), self._script, keys, args)
        except _LOST as exc:
            _outcome_unknown(operation, session, exc)
        except redis.exceptions.ResponseError as exc:
            _damaged(operation, session, keys, exc)
        except _BACKEND_ERRORS as exc:
            _fail(operation, session, exc)
        if isinstance(got, list):
            found = {raw.decode("utf-8") for raw in got if raw}
            check_batch(session, batch, found)  # raises the ValueError the script decided on
            raise StoreError(f"{operation} session {session!r} failed: the script refused a batch check_batch accepts")
        return bool(got)
