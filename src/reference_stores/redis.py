"""The Redis store: the application's ``redis.asyncio`` client (``Redis`` or
``RedisCluster``), four keys per session (and the receipts of takes), five Lua scripts.

How it keeps each Redis fact that breaks naive stores:

- Redis runs one command at a time, but a sequence of commands is not atomic: a take
  written as ``LRANGE`` then ``DEL`` hands a steer to two replicas (both read before
  either deletes), and a save written as ``DEL`` then ``RPUSH`` lets a reader see an
  empty or half-written transcript. Every operation here is one command, one Lua
  script or one ``MULTI``/``EXEC``, which Redis runs with nothing interleaved: a take
  is ``LRANGE`` and ``DEL`` in one script, a save checks the version and rewrites in
  one script, a read reads every key of the session in one transaction.
- ``LRANGE key 0 999`` reads the first 1,000 items only: reads ask for ``0 -1``.
- A Redis Cluster runs a multi-key command, transaction or script only when every key
  is in one hash slot (else ``CROSSSLOT``), and a key's slot comes from its *hash tag*,
  the text between its first ``{`` and the first ``}`` after it. Every key of a session
  is ``<prefix>{<id>}:<kind>``, the session id inside the tag with ``%``, ``{`` and
  ``}`` written ``%25``, ``%7B``, ``%7D``: an id such as ``}x`` or ``{a}`` cannot end
  the tag early or start another, two ids never share a key (the escape is one-to-one
  and the tag is closed before the suffix, so ``x`` and ``x:messages`` are two
  sessions, as they are not for keys ``<prefix>:<id>`` and ``<prefix>:<id>:messages``),
  and no key is case-folded. The prefix may hold no brace, so the tag is always the id.
- Values are bytes: ids, message bodies and steers keep NUL and every code point. A
  client made with ``decode_responses=True`` would turn the digests into text (or fail
  on them), so it is refused at construction.

Keys of session ``s``: ``:v`` the version (a counter that every save that changes the
transcript raises; absent means never saved), ``:d`` the chain digests (of each
message's element, its :func:`~reference_stores._incremental.row_text`), 32 bytes per
message, concatenated, ``:m`` a list of the messages, ``:s`` a list of steers; ``:r<token>`` a take's receipt (a list of
the steers it took), ``:p`` the receipts in flight (a sorted set: token -> the server's
time in microseconds when the take ran), ``:a`` those given up (a set), ``:o`` the ages
of receipts holding steers of older ones (a sorted set: token -> the age of the oldest
receipt it took from). A message of one piece of text, the
common one, is stored as ``role:text`` and read back without any JSON, and so is one of
one tool call or one tool result, in a form of its own
(:func:`reference_stores._incremental.row_text`, which its digest covers); any other as
its JSON text, which starts with ``{"`` (no role starts with ``{``).

Saves write only what changed, through :mod:`reference_stores._incremental`. The save
script runs if the stored version is the one the handle planned for, or if the stored
digest of the last row the plan keeps is the one it planned for (another handle wrote,
but only after that row: the rows after it are rewritten). Otherwise (the prefix
itself changed, or the handle knows nothing of the session) the reply holds the stored
version and digests, and the handle plans again, comparing digests only (no message is
decoded). A save is one round trip (two when the prefix changed behind the handle's
back), and so is a take that finds nothing (one script; one that takes steers then
acknowledges its receipt, a second) and a read (``GET``, ``GET``, ``LRANGE`` in one
``MULTI``/``EXEC``).

Lost replies: the client must not retry commands (``Redis()`` retries 10 times by
default and ``RedisCluster`` 3 in redis-py 7.4, ``Redis.from_url`` never; the store
refuses a client that does, naming the setting): a retried ``RPUSH`` whose reply was
lost queues the steer twice, and a retried take hands out nothing while what the first
one took is gone. redis-py 7.4's ``RedisCluster`` loses connections ("Connection
closed by server") when many first commands arrive while it is still learning the
cluster's slots, which its retries used to hide; so a store on a cluster client learns
the cluster's layout before its first command (``tests/test_redis_driver.py`` shows
both), and again, bounded, after a lost connection (below, "Bounded calls"). A
write whose connection is lost once it was sent raises
:class:`~storetest.contract.OutcomeUnknown`; one that provably never ran raises
:class:`~storetest.contract.StoreError`: its connection never opened, its handshake
failed before the command was written, or the server refused it while loading
(``-LOADING``).

A take is two-phase, so that a lost reply delays steers and never loses them: its
script moves the queued steers into its *receipt*, registered in flight, and returns
them; the store then acknowledges the receipt (deletes it). Until then no other take
touches it, unless it is *given up* or has been in flight longer than
``receipt_seconds`` (:data:`RECEIPT_SECONDS` by default): every take first returns the
steers of such receipts, the oldest receipt first, then the queue. A receipt is as old
as its take, or, when the take returned steers of older receipts, as the oldest of
those; and a take returns receipts only up to the first one still in flight, and the
queue only once none is left, so that steers come back in the order they were queued
(``tests/test_faults_redis.py -k oldest_first``). When a take's reply is lost the
store gives its receipt up on a new connection and raises ``StoreError`` (the next take,
on any handle, returns those steers first); if the take never ran, the give-up marks
its receipt so that, arriving late, it does nothing. If the give-up fails too, the take
raises ``OutcomeUnknown`` without steers, and its steers come back to this handle's
next take, or to any take once the window has passed. An acknowledgement whose reply
is lost raises ``OutcomeUnknown`` with the steers (the contract's "taken if it
landed, still queued if not"). ``tests/test_faults_redis.py`` loses a take's reply and
its give-up on a server and on a cluster and sees the steers come back, once.

Damage: every script checks the type of every key it reads (the take, each steer's
UTF-8; the save, the version's digits and the digests' length) before it writes
anything, and reads check what they decode: a key holding what this store never
writes raises ``StoreError`` naming the key and what is wrong, with nothing changed
(``tests/test_faults_redis.py``, one case per key kind).

Bounded calls: every call ends within one bound, 2 x (``socket_connect_timeout`` +
``socket_timeout``), counted from its start and carried through every command of the
call (a script's ``SCRIPT LOAD`` and second ``EVALSHA``, a take's acknowledgement or
give-up) and, on a cluster, through learning the cluster's layout: redis-py bounds each
wait alone (a reply, a connection, each reply of a new connection's handshake), so a
call of several round trips, each answered just in time, would take a multiple of it.
When the bound runs out the command in flight is abandoned (its connection closed) and
the call raises ``StoreError``, or ``OutcomeUnknown`` if a write may have run. On a
connection that stalls (no reply, no reset) a call ends at its first command left
unanswered; a take then tries once to give its receipt up (or, once it has its steers,
to acknowledge it), on a new connection, within what is left. After a lost connection
redis-py 7.4's cluster client re-reads the cluster's layout at its next command, from
every node in turn, each for the full socket timeout, calls queueing behind it (and,
in a cluster transaction, on an event loop of its own in a thread, blocking this one),
and closes every connection of every node when that fails: a call took 6.18 s against
1.5 s. So the stores learn it themselves before a command, when redis-py has marked it
stale: one discovery per client, shared by every call of every store on it, asking the
nodes in redis-py's order (the node that just failed last) for CLUSTER SLOTS, within
the bound, each node only for what is left of it; a call whose deadline comes first
raises ``StoreError`` (its command was not sent) and the discovery goes on for the next.
An error raised inside redis-py that is not one of its own (its cluster client writing
on a connection another task closed between its check and its write: ``AttributeError:
'NoneType' object has no attribute 'writelines'``) is a ``StoreError`` (nothing was
written) or, for anything else that may have sent a write, ``OutcomeUnknown``. Both
stores warn at construction when a timeout is ``None`` (no bound), which is what
``Redis.from_url`` leaves them unless the URL or the call sets them.
``tests/test_redis_log_store.py`` stalls a connection in use and a new one and times
every call; ``tests/test_faults_redis.py`` stalls every node of a cluster, one node, and
slows and resets them, under load, and times every call.

Durability is the server's setting, not the store's: an acknowledged write is in the
server's memory. With ``appendonly yes`` and ``appendfsync always`` it is in the AOF,
fsynced, before the reply; with ``everysec`` (Redis's default once AOF is on) it is
usually written to the AOF before the reply, but Redis postpones that write for up to
two seconds while a background fsync is still running and replies meanwhile: a power
cut or OS crash may lose the last seconds of acknowledged writes, and on a slow disk so
may a crash of the server alone, never part of a write; with persistence off (or RDB
snapshots only) a crash of the server loses everything since the last snapshot.
``tests/test_crash_redis.py`` SIGKILLs the server under ``always``, ``everysec`` and no
persistence and counts what survived. Nothing is promised about replicas (``WAIT``,
failover): no test here shows what they keep.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import warnings
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NoReturn, TypeVar

import redis.asyncio
import redis.exceptions

from reference_stores._entry_codec import gc_paused
from reference_stores._incremental import DEFAULT_CACHE_SESSIONS, DIGEST_SIZE, Remembered
from storetest.codec import (
    CodecError,
    decode_trusted,
    trusted_text_message,
    trusted_tool_call_message,
    trusted_tool_result_message,
)
from storetest.contract import (
    Message,
    OutcomeUnknown,
    StoreError,
    check_session_id,
    check_steer_text,
)

__all__ = ["DEFAULT_PREFIX", "RECEIPT_SECONDS", "RedisStore", "session_key"]

_log = logging.getLogger(__name__)

#: Where the store's keys go unless told otherwise.
DEFAULT_PREFIX: Final = "storetest:"

# KEYS: version, digests, messages. ARGV: the version planned for, rows kept, delete
# after them (1/0), raise the version (1/0), the digest of the last row kept, the new
# rows' digests, their bodies. When the stored version is not the one planned for, the
# save still goes ahead if the last row kept has the digest planned for (a chain digest:
# every row up to it is as planned), rewriting every row after it. Otherwise it writes
# nothing and returns {0, stored version, every stored digest}: the plan needs them all
# once the rows it meant to keep are not as planned.
# Once done it returns {1, version}.
_SAVE: Final = """
for i, wanted in ipairs({'string', 'string', 'list'}) do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= wanted then
    return redis.error_reply('DAMAGED ' .. i .. ' holds a ' .. kind .. ', not a ' .. wanted)
  end
end
local raw = redis.call('GET', KEYS[1]) or '0'
if not string.find(raw, '^%d+$') or #raw > 15 then
  return redis.error_reply('DAMAGED 1 holds ' .. #raw .. ' bytes that are not a version number')
end
local digests, rows = redis.call('STRLEN', KEYS[2]), redis.call('LLEN', KEYS[3])
if digests ~= rows * 32 then
  local want = ' messages, not ' .. rows * 32
  return redis.error_reply('DAMAGED 2 holds ' .. digests .. ' bytes of digests for ' .. rows .. want)
end
local v = tonumber(raw)
local keep = tonumber(ARGV[2])
local delete = ARGV[3] == '1'
local changed = ARGV[4] == '1'
if v ~= tonumber(ARGV[1]) then
  if keep == 0 or redis.call('GETRANGE', KEYS[2], (keep - 1) * 32, keep * 32 - 1) ~= ARGV[5] then
    return {0, v, redis.call('GET', KEYS[2]) or ''}
  end
  delete, changed = true, true
end
if delete then
  if keep == 0 then
    redis.call('DEL', KEYS[2], KEYS[3])
  else
    redis.call('LTRIM', KEYS[3], 0, keep - 1)
    redis.call('SET', KEYS[2], redis.call('GETRANGE', KEYS[2], 0, keep * 32 - 1))
  end
end
local n = #ARGV
if n > 6 then
  redis.call('APPEND', KEYS[2], ARGV[6])
  for i = 7, n, 1000 do
    redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, n)))
  end
end
if changed then
  v = v + 1
  redis.call('SET', KEYS[1], v)
end
return {1, v}
"""
# KEYS: steers, this take's receipt, the session's receipts in flight (a sorted set: token
# -> the server's time in microseconds when its take ran), the receipts given up (a set
# of tokens), the ages of receipts that hold steers of older receipts (a sorted set:
# token -> the age of the oldest receipt it took from; a receipt not there is as old as
# its take). ARGV: the window (microseconds) after which a receipt in flight counts as
# given up, this take's token, what a receipt's key is before its token, then the
# tokens of receipts this handle gave up on (takes whose outcome it never learnt).
# A receipt already there (a list, or the read-back's mark) means this take arrives
# after its store gave up on it: it does nothing. Otherwise it takes the steers of the
# receipts given up or out of their window, oldest receipt first, stopping at the
# first receipt still in flight (its steers are older than the next ones); then, if
# no receipt is left in flight, the queue (newer than every receipt); all into its
# receipt, registered in flight until its store acknowledges it (_ACK), as old as
# the oldest receipt it took from. So every receipt holds steers queued one after
# the other, with none of another receipt's between them, and receipts returned by
# age come back in the order their steers were queued.
_TAKE: Final = r"""
local function utf8(s)
  local i, n = 1, #s
  while true do
    i = string.find(s, '[\128-\255]', i)
    if not i then return true end
    local c, len = string.byte(s, i), 0
    if c >= 194 and c <= 223 then len = 2 elseif c >= 224 and c <= 239 then len = 3
    elseif c >= 240 and c <= 244 then len = 4 else return false end
    if i + len - 1 > n then return false end
    for k = 1, len - 1 do
      local b = string.byte(s, i + k)
      if b < 128 or b > 191 then return false end
    end
    local b = string.byte(s, i + 1)
    if (c == 224 and b < 160) or (c == 237 and b > 159) or (c == 240 and b < 144) or (c == 244 and b > 143) then
      return false
    end
    i = i + len
  end
end
local function steers(key, name)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then return {} end
  if kind ~= 'list' then return redis.error_reply('DAMAGED ' .. name .. ' holds a ' .. kind .. ', not a list') end
  local found = redis.call('LRANGE', key, 0, -1)
  for i, steer in ipairs(found) do
    if not utf8(steer) then
      local where = ' (' .. i .. ' of ' .. #found .. ')'
      return redis.error_reply('DAMAGED ' .. name .. ' holds an element' .. where .. ' that is not UTF-8')
    end
  end
  return found
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {} end
for i, wanted in ipairs({'list', 'zset', 'set', 'zset'}) do
  local kind = redis.call('TYPE', KEYS[i == 1 and 1 or i + 1]).ok
  if kind ~= 'none' and kind ~= wanted then
    return redis.error_reply('DAMAGED ' .. (i == 1 and 1 or i + 1) .. ' holds a ' .. kind .. ', not a ' .. wanted)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cutoff = now - tonumber(ARGV[1])
local given = {}
for i = 4, #ARGV do given[ARGV[i]] = true end
-- Read and check everything first: damage raises before anything is moved.
local due, taken, oldest, waiting = {}, {}, nil, false
if redis.call('EXISTS', KEYS[3]) == 1 then
  local flight, parts = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'), {}
  for i = 1, #flight, 2 do
    local at = tonumber(flight[i + 1])
    parts[#parts + 1] = {flight[i], at, tonumber(redis.call('ZSCORE', KEYS[5], flight[i]) or at), i}
  end
  table.sort(parts, function(a, b) if a[3] ~= b[3] then return a[3] < b[3] end return a[4] < b[4] end)
  for _, part in ipairs(parts) do
    local token = part[1]
    if not (part[2] <= cutoff or given[token] or redis.call('SISMEMBER', KEYS[4], token) == 1) then
      waiting = true
      break
    end
    local key = ARGV[3] .. token
    if redis.call('TYPE', key).ok ~= 'string' then
      local found = steers(key, 'r ' .. token)
      if found.err then return found end
      for _, steer in ipairs(found) do taken[#taken + 1] = steer end
      if #found > 0 and not oldest then oldest = part[3] end
    end
    due[#due + 1] = token
  end
end
local queued = steers(KEYS[1], '1')
if queued.err then return queued end
if waiting and #taken > 0 then queued = {} end
for i = 4, #ARGV do
  local key = ARGV[3] .. ARGV[i]
  if redis.call('EXISTS', key) == 0 then
    redis.call('SET', key, 'claimed', 'PX', math.floor(tonumber(ARGV[1]) / 1000))
  end
end
for _, token in ipairs(due) do
  local key = ARGV[3] .. token
  if redis.call('TYPE', key).ok == 'list' then redis.call('DEL', key) end
  redis.call('ZREM', KEYS[3], token)
  redis.call('SREM', KEYS[4], token)
  redis.call('ZREM', KEYS[5], token)
end
if #queued == 0 and #taken == 0 then return {} end
if #taken == 0 then
  taken = queued
  redis.call('RENAME', KEYS[1], KEYS[2])
else
  for _, steer in ipairs(queued) do taken[#taken + 1] = steer end
  if #queued > 0 then redis.call('DEL', KEYS[1]) end
  for i = 1, #taken, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(taken, i, math.min(i + 999, #taken)))
  end
end
redis.call('ZADD', KEYS[3], now, ARGV[2])
if oldest then redis.call('ZADD', KEYS[5], oldest, ARGV[2]) end
return taken
"""
# KEYS: a take's receipt, the receipts in flight, those given up, their ages. ARGV: its
# token. The store has the take's steers: the receipt goes. 1 if it was still there, 0
# if another take had already taken its steers (it came after the window).
_ACK: Final = """
for i, wanted in ipairs({'list', 'zset', 'set', 'zset'}) do
  local kind = redis.call('TYPE', KEYS[i]).ok
  if kind ~= 'none' and kind ~= wanted then
    return redis.error_reply('DAMAGED ' .. (i + 1) .. ' holds a ' .. kind .. ', not a ' .. wanted)
  end
end
local had = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return had
"""
# KEYS: a take's receipt, the receipts given up. ARGV: the window (microseconds), its
# token. The take's reply was lost: if it ran, its receipt is given up (the next take,
# on any handle, returns its steers first): 1; if it has not run, a mark stops it from
# ever running: 0.
_GIVE_UP: Final = """
local kind = redis.call('TYPE', KEYS[2]).ok
if kind ~= 'none' and kind ~= 'set' then return redis.error_reply('DAMAGED 4 holds a ' .. kind .. ', not a set') end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], 'claimed', 'PX', math.floor(tonumber(ARGV[1]) / 1000))
  return 0
end
if redis.call('TYPE', KEYS[1]).ok ~= 'list' then return 0 end
redis.call('SADD', KEYS[2], ARGV[2])
return 1
"""
#: How long a take's receipt stays in flight (its steers reserved for the take that
#: made it, which acknowledges it once it has them) before any take may return its
#: steers; and how long the mark of a take given up stays.
RECEIPT_SECONDS: Final = 60

# The replies to a command that may have run are lost with these.
_LOST: Final = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError, TimeoutError)
_BACKEND_ERRORS: Final = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError, TimeoutError)


_T = TypeVar("_T")


class _Unsent(redis.exceptions.ConnectionError):
    """A command the store never sent: the call's bound ran out, or the cluster's layout
    could not be learnt, before it was written."""


class _Spent(redis.exceptions.TimeoutError):
    """The call's bound ran out while a command was in flight (it may have run)."""


class _DriverFault(redis.exceptions.ConnectionError):
    """An error raised from inside redis-py that is not one of its own (e.g. its
    cluster client writing on a connection another task had just closed)."""


class _Calls:
    """What bounds a store's calls on one client: one deadline per call,
    2 x (``socket_connect_timeout`` + ``socket_timeout``) from its start, carried
    through every command, script load and acknowledgement of the call and, on a
    cluster client, through learning the cluster's layout (see the module docstring,
    "Bounded calls")."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cluster = isinstance(client, redis.asyncio.RedisCluster)
        settings = client.get_connection_kwargs() if self.cluster else client.connection_pool.connection_kwargs
        connect, reply = settings.get("socket_connect_timeout"), settings.get("socket_timeout")
        #: The bound of one call (seconds), or None when a timeout is None (no bound).
        self.bound: float | None = None if connect is None or reply is None else 2 * (connect + reply)

    def deadline(self) -> float | None:
        """When a call starting now must end (the event loop's clock), or None."""
        return None if self.bound is None else asyncio.get_running_loop().time() + self.bound

    async def run(self, deadline: float | None, command: Callable[[], Awaitable[_T]]) -> _T:
        """Await ``command()`` (one command, script or transaction) within ``deadline``; on
        a cluster client whose layout redis-py has marked stale (after any lost
        connection), first learn it again, bounded and shared (:func:`_learn_layout`),
        so that redis-py never re-reads it inside a command (from every node in turn,
        each for the full socket timeout, closing every connection if that fails)."""
        if self.cluster and self.client._initialize:
            await _learn_layout(self.client, deadline, self.bound)
        timeout = None
        try:
            if deadline is None:
                return await command()
            if deadline <= asyncio.get_running_loop().time():
                raise _Unsent(f"the call's bound of {self.bound:g} s ran out before this command was sent")
            async with asyncio.timeout_at(deadline) as timeout:
                return await command()
        except TimeoutError as exc:  # the built-in one: asyncio's, not redis-py's
            if timeout is not None and timeout.expired():
                raise _Spent(f"the call's bound of {self.bound:g} s ran out") from exc
            raise
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError, asyncio.CancelledError):
            raise
        except Exception as exc:
            if not _raised_in_driver(exc):
                raise
            raise _DriverFault(f"redis-py failed inside ({type(exc).__name__}: {exc})") from exc

    async def script(self, deadline: float | None, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run a registered script: ``EVALSHA``, and if the server does not have it yet,
        ``SCRIPT LOAD`` then ``EVALSHA`` again, each through :meth:`run` (so that each
        command, not only the first, finds the cluster's layout learnt)."""
        client, sha = self.client, script.sha
        try:
            return await self.run(deadline, lambda: client.evalsha(sha, len(keys), *keys, *args))
        except redis.exceptions.NoScriptError:
            sha = script.sha = await self.run(deadline, lambda: client.script_load(script.script))
            return await self.run(deadline, lambda: client.evalsha(sha, len(keys), *keys, *args))


#: Per cluster client, its layout being learnt: one discovery shared by every call of
#: every store on that client.
_DISCOVERIES: weakref.WeakKeyDictionary[Any, asyncio.Task[None]] = weakref.WeakKeyDictionary()


async def _learn_layout(client: Any, deadline: float | None, bound: float | None) -> None:
    """Wait, at most until ``deadline``, for the cluster client's layout to be learnt
    (CLUSTER SLOTS), joining the discovery in flight or starting one. A discovery asks
    the nodes in redis-py's order (a node that just failed last), each only for what is
    left of the discovery's own bound (``bound``, the call's), and it goes on for later
    callers when this one's deadline comes first. Raises :class:`_Unsent`: the command
    that needed it was not sent."""
    loop = asyncio.get_running_loop()
    task = _DISCOVERIES.get(client)
    if task is None or task.done() or task.get_loop() is not loop:
        task = loop.create_task(_discover(client, bound))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        _DISCOVERIES[client] = task
    try:
        if deadline is None:
            await asyncio.shield(task)
        else:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(task)
    except TimeoutError as exc:
        raise _Unsent(f"the cluster's layout could not be learnt within the call's bound of {bound:g} s "
                      "(no node answered CLUSTER SLOTS in time)") from exc
    except (redis.exceptions.RedisError, OSError) as exc:
        raise _Unsent(f"the cluster's layout could not be learnt ({_describe(exc)})") from exc


async def _discover(client: Any, bound: float | None) -> None:
    """What ``RedisCluster.initialize()`` does, bounded by ``bound``, and without closing
    every connection of every node when it fails (which breaks other calls in flight):
    the node manager's CLUSTER SLOTS (the nodes in turn; cancelled at the bound, a
    node's connection is closed, no other), the command table once, then the client is
    marked as knowing its layout."""
    async with asyncio.timeout(bound):
        manager = client.nodes_manager
        await manager.initialize()
        if not client.commands_parser.commands:
            await client.commands_parser.initialize(manager.default_node)
    client._initialize = False


def _raised_in_driver(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside redis-py's code (its innermost frame)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return "/redis/" in tb.tb_frame.f_code.co_filename.replace("\\", "/")


def _message(element: bytes) -> Message:
    """The message an element holds (its :func:`~reference_stores._incremental.row_text`).
    The store wrote it from a checked message: the trusted readers skip value checks it
    cannot fail."""
    text = element.decode("utf-8")
    if text.startswith("{"):
        form = text[1:2]
        if form == "!":
            role, m, n, rest = text[2:].split(":", 3)
            i, j = int(m), int(m) + int(n)
            return trusted_tool_call_message(role, rest[:i], rest[i:j], rest[j:])
        if form == "?":
            role, m, error, rest = text[2:].split(":", 3)
            i = int(m)
            return trusted_tool_result_message(role, rest[:i], rest[i:], error == "1")
        return decode_trusted(text)
    role, _, rest = text.partition(":")
    return trusted_text_message(role, rest)


def _rows(start: int, blob: bytes) -> list[tuple[int, bytes]]:
    """``(position, digest)`` rows from concatenated digests beginning at ``start``."""
    return [(start + i, blob[o : o + DIGEST_SIZE]) for i, o in enumerate(range(0, len(blob), DIGEST_SIZE))]


def session_key(prefix: str, session: str, kind: str) -> bytes:
    """The key of ``session``'s ``kind`` (``v``, ``d``, ``m``, ``s``): the id, escaped,
    inside the hash tag, so that every key of one session is in one cluster slot."""
    escaped = session.encode("utf-8").replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")
    return b"%s{%s}:%s" % (prefix.encode("utf-8"), escaped, kind.encode("ascii"))


class RedisStore:
    """A store keeping transcripts and steers in Redis or a Redis Cluster.

    Several stores (in one process or many) with the same prefix on the same server or
    cluster are replicas of one another. Each remembers recent sessions, to write only
    what a save changed; that memory is checked against the stored version.

    :param client: a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` (redis-py
        below 8: 8.0 and 8.1's cluster client fail concurrent first commands with an
        ``AttributeError``, ``tests/test_redis_driver.py``), made on
        the event loop the store will be used from, without ``decode_responses=True``.
        The store never closes it.
    :param prefix: what every key starts with; it may hold no ``{`` or ``}``.
    :param cache_sessions: how many sessions to remember for incremental saves (least
        recently used are forgotten first); ``0`` disables it.
    :param receipt_seconds: how long a take's receipt stays in flight before any take
        may return its steers (see the module docstring, "A take is two-phase"); keep it
        longer than the longest call, 2 x (``socket_connect_timeout`` + ``socket_timeout``).
    :raises TypeError: ``client`` is a URL, a synchronous client or not a Redis client.
    :raises ValueError: the client decodes responses or retries commands, the prefix
        holds a brace, ``cache_sessions`` is negative, or ``receipt_seconds`` is not a
        positive number.

    Every method raises ``TypeError``/``ValueError`` for bad arguments before sending
    anything, and :class:`~storetest.contract.StoreError` (from the driver's error)
    when Redis refuses, which has then changed nothing; or its subclass
    :class:`~storetest.contract.OutcomeUnknown` when the connection was lost once a
    write was sent.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        cache_sessions: int = DEFAULT_CACHE_SESSIONS,
        receipt_seconds: float = RECEIPT_SECONDS,
    ) -> None:
        _check_client(client)
        _check_prefix(prefix)
        self._remembered = Remembered(cache_sessions)
        self._client = client
        self._prefix = prefix
        self._save = client.register_script(_SAVE)
        self._take = client.register_script(_TAKE)
        self._ack = client.register_script(_ACK)
        self._give_up_script = client.register_script(_GIVE_UP)
        if isinstance(receipt_seconds, bool) or not isinstance(receipt_seconds, (int, float)) or not (
            0 < receipt_seconds < 10**9
        ):
            raise ValueError(f"receipt_seconds must be a positive number of seconds, not {receipt_seconds!r}")
        self._window = int(receipt_seconds * 1_000_000)
        # Per session, the tokens of this handle's takes whose outcome it never learnt:
        # its next take there returns their steers first.
        self._given_up: dict[str, list[str]] = {}
        self._calls = _Calls(client)

    def __repr__(self) -> str:
        return f"RedisStore({self._client!r}, prefix={self._prefix!r})"

    def _keys(self, session: str, *kinds: str) -> list[bytes]:
        return [session_key(self._prefix, session, kind) for kind in kinds]

    async def save(self, session: str, messages: Sequence[Message]) -> None:
        """Make the session's transcript exactly ``messages``, in one script."""
        session = check_session_id(session)
        keys = self._keys(session, "v", "d", "m")
        plan = self._remembered.prepare(keys[0], messages)
        known = self._remembered.get(keys[0])
        # Plan for the version this handle knows (none: a new session). If another
        # handle wrote since, the script goes ahead when the rows kept are as planned
        # (two replicas growing one conversation); else it refuses, and sends the
        # stored version and every stored digest, which the plan then needs.
        version = known.version if known is not None else 0
        stored = b""  # every stored digest, from the last refused save
        deadline = self._calls.deadline()
        try:
            while True:
                # Only a refused save's version makes the plan ask for stored digests.
                plan.start(version)
                while plan.fetch_from is not None:
                    start = plan.fetch_from
                    plan.resolve(_rows(start, stored[start * DIGEST_SIZE :]))
                keep = plan.keep
                last_kept = plan.digest_at(keep - 1)
                args: list[Any] = [version, keep, int(plan.delete), int(plan.changed), last_kept]
                if plan.rows:
                    args.append(b"".join(row[1] for row in plan.rows))
                    # A row's text is its element (reference_stores._incremental.row_text).
                    args.extend(text.encode() for _, _, text in plan.rows)
                try:
                    done, version, *rest = await self._calls.script(deadline, self._save, keys, args)
                except redis.exceptions.ResponseError as exc:
                    _damaged("save to", session, keys, exc)
                if done:
                    break
                stored = rest[0]
        except BaseException as exc:
            self._remembered.forget(keys[0])
            if isinstance(exc, _LOST):
                _outcome_unknown("save to", session, exc)
            if isinstance(exc, _BACKEND_ERRORS):
                _fail("save to", session, exc)
            raise
        self._remembered.learn(keys[0], plan.known(int(version)))

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript in the order saved; ``[]`` for an unused session."""
        session = check_session_id(session)
        keys = self._keys(session, "v", "d", "m")

        async def read() -> Any:
            # MULTI/EXEC: one snapshot, one round trip (and cheaper than a script, which
            # would copy 2,000 messages into a Lua table and out again). On a cluster
            # client no await comes between _Calls.run's check that the layout is known
            # and the queueing (redis-py 7.4 queues each command of a cluster
            # transaction from a thread of its own, which would learn a stale layout on an
            # event loop of its own, blocking this one meanwhile).
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.get(keys[0])
                pipe.get(keys[1])
                pipe.lrange(keys[2], 0, -1)
                return await pipe.execute(raise_on_error=False)

        try:
            replies = await self._calls.run(self._calls.deadline(), read)
        except _BACKEND_ERRORS as exc:
            _fail("read of", session, exc)
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, redis.exceptions.ResponseError):
                _damaged_key("read of", session, key, f"is not what this store writes there ({reply})", reply)
        raw_version, blob, elements = replies
        raw_version, blob = raw_version or b"0", blob or b""
        if not raw_version.isdigit() or len(raw_version) > 15:
            _damaged_key("read of", session, keys[0], f"holds {bytes(raw_version[:40])!r}, not a version number")
        version = int(raw_version)
        result = []
        # A few objects per element, none in a cycle: the cyclic collector paused, as
        # on SQLite (see reference_stores._entry_codec.gc_paused). No await inside.
        with gc_paused():
            for i, element in enumerate(elements):
                try:
                    result.append(_message(element))
                except (CodecError, ValueError, TypeError, KeyError, RecursionError) as exc:
                    _damaged_key("read of", session, keys[2], f"holds an element ({i + 1} of {len(elements)}) "
                                 f"that is not a message ({type(exc).__name__}: {exc})", exc)
        if len(blob) != len(result) * DIGEST_SIZE:
            _damaged_key("read of", session, keys[1], f"holds {len(blob)} bytes of digests for {len(result)} messages, "
                         f"not {len(result) * DIGEST_SIZE}")
        if version and self._remembered.wants_read(keys[0], version, len(result)):
            # The stored digests are already one concatenation: remembered as they are.
            self._remembered.learn_read(keys[0], version, list(result), (bytes(blob),))
        return result

    async def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session."""
        session = check_session_id(session)
        data = check_steer_text(text).encode("utf-8")
        (key,) = self._keys(session, "s")
        try:
            await self._calls.run(self._calls.deadline(), lambda: self._client.rpush(key, data))
        except redis.exceptions.ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                _damaged_key("add_steer to", session, key, f"is not a list ({exc})", exc)
            _fail("add_steer to", session, exc)
        except _LOST as exc:
            _outcome_unknown("add_steer to", session, exc)
        except _BACKEND_ERRORS as exc:
            _fail("add_steer to", session, exc)

    async def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none."""
        session = check_session_id(session)
        operation = "take_steers from"
        token = secrets.token_hex(8)
        keys = self._keys(session, "s", f"r{token}", "p", "a", "o")
        given_up = self._given_up.get(session, [])
        args = [self._window, token, session_key(self._prefix, session, "r"), *given_up]
        deadline = self._calls.deadline()
        try:
            taken = await self._calls.script(deadline, self._take, keys, args)
        except _LOST as exc:
            await self._give_up(operation, session, keys, token, exc, deadline)
        except redis.exceptions.ResponseError as exc:
            _damaged(operation, session, keys, exc)
        except _BACKEND_ERRORS as exc:
            _fail(operation, session, exc)
        # It ran: the receipts given up are taken (or marked, if their takes never ran).
        self._given_up.pop(session, None)
        if not taken:
            return []
        steers = [bytes(t).decode("utf-8") for t in taken]
        # The steers are in this take's receipt, in flight: acknowledged, it goes.
        try:
            had = await self._calls.script(deadline, self._ack, keys[1:], [token])
        except redis.exceptions.ResponseError as exc:
            self._given_up.setdefault(session, []).append(token)
            _damaged(operation, session, keys, exc)
        except _BACKEND_ERRORS as exc:
            self._given_up.setdefault(session, []).append(token)
            if isinstance(exc, _LOST) and not _before_sending(exc):
                raise OutcomeUnknown(
                    f"{operation} session {session!r} may or may not have taken its steers: the connection "
                    f"to Redis was lost once their acknowledgement was sent ({_describe(exc)}); if it did not "
                    "land, the next take returns them",
                    steers=steers,
                ) from exc
            raise StoreError(
                f"{operation} session {session!r} failed: the steers it read could not be acknowledged "
                f"({_describe(exc)}); the next take returns them"
            ) from exc
        if not had:
            raise StoreError(
                f"{operation} session {session!r} failed: its reply came after the receipt window "
                f"({self._window / 1e6:g} s) and another take has returned its steers"
            )
        return steers

    async def _give_up(
        self, operation: str, session: str, keys: list[bytes], token: str, lost: BaseException,
        deadline: float | None,
    ) -> NoReturn:
        """A take whose reply was lost: give its receipt up on a new connection, so that
        the next take, on any handle, returns its steers first (or, if it never ran,
        mark it so that it never will), and raise StoreError: nothing is taken. If that
        fails too, OutcomeUnknown; the handle's next take gives it up, and any take
        once it has been in flight longer than the window."""
        if _before_sending(lost):
            _fail(operation, session, lost)
        try:
            ran = await self._calls.script(deadline, self._give_up_script, [keys[1], keys[3]], [self._window, token])
        except _BACKEND_ERRORS:
            self._given_up.setdefault(session, []).append(token)
            raise OutcomeUnknown(
                f"{operation} session {session!r} may or may not have taken steers: the connection to Redis "
                f"was lost once the command was sent ({_describe(lost)}); what it took is returned first "
                "by this handle's next take, or by any take after the receipt window",
            ) from lost
        if ran:
            _log.info("%s session %r: the reply was lost (%s); its steers go back to the front of the queue",
                      operation, session, _describe(lost))
            raise StoreError(
                f"{operation} session {session!r} failed: {_describe(lost)} (the reply was lost; what the take "
                "took is returned first by the next take)"
            ) from lost
        _fail(operation, session, lost)


def _check_client(client: object, store: str = "RedisStore") -> None:
    """Refuse a client the Redis stores cannot work with, naming the fix; warn when a
    call on it could wait forever (see the module docstring, "Bounded calls")."""
    if isinstance(client, (str, bytes)):
        raise TypeError(
            f"{store} takes the application's redis.asyncio client, not a URL: "
            "pass redis.asyncio.Redis.from_url(url) (or redis.asyncio.RedisCluster.from_url(url))"
        )
    if not isinstance(client, (redis.asyncio.Redis, redis.asyncio.RedisCluster)):
        hint = (
            "; this one is synchronous: make it with redis.asyncio instead"
            if type(client).__module__.startswith("redis.")
            else ""
        )
        raise TypeError(
            f"{store} needs a redis.asyncio.Redis or redis.asyncio.RedisCluster, not "
            f"{type(client).__module__}.{type(client).__qualname__}{hint}"
        )
    if client.get_encoder().decode_responses:
        raise ValueError(
            "the client decodes responses (decode_responses=True), which turns the store's binary "
            "digests and values into text; give the store a client made without decode_responses"
        )
    retry: Any
    if isinstance(client, redis.asyncio.RedisCluster):
        retry, settings = client.retry, client.get_connection_kwargs()
    else:
        settings = client.connection_pool.connection_kwargs
        retry = settings.get("retry")
    # No Retry given: redis-py's connections retry once if retry_on_error names errors, else never.
    retries = retry.get_retries() if retry is not None else 1 if settings.get("retry_on_error") else 0
    if retries:
        raise ValueError(
            f"{store} needs a client that does not retry commands (this one retries {retries} "
            "times; Redis() and RedisCluster retry by default): a write whose reply was lost "
            "would be sent again and could land twice. Pass "
            "retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0); the store raises "
            "OutcomeUnknown where a retry would have guessed"
        )
    unset = [name for name in ("socket_timeout", "socket_connect_timeout") if settings.get(name) is None]
    if unset:
        warnings.warn(
            f"{store}: the client's {' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} None, so a "
            "stalled connection blocks a call forever; set both (redis-py before 8 leaves them None)",
            RuntimeWarning,
            stacklevel=3,
        )


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
        raise ValueError(
            f"prefix must be a str without '{{' or '}}' (the hash tag must be the session id), not {prefix!r}"
        )
    return prefix


def _fail(operation: str, session: str, exc: BaseException) -> NoReturn:
    raise StoreError(f"{operation} session {session!r} failed: {_describe(exc)}") from exc


def _outcome_unknown(operation: str, session: str, exc: BaseException, steers: Sequence[str] = ()) -> NoReturn:
    """Raise for a write whose connection was lost: :class:`OutcomeUnknown`, unless it
    was lost before the write could be sent (a connection that never opened)."""
    if _before_sending(exc):
        _fail(operation, session, exc)
    raise OutcomeUnknown(
        f"{operation} session {session!r} may or may not have taken effect: the connection to Redis "
        f"was lost once the command was sent ({_describe(exc)})",
        steers=steers,
    ) from exc


def _before_sending(exc: BaseException) -> bool:
    """Whether ``exc`` provably came before the command reached Redis: the connection
    never opened, its handshake (or health check) failed before the command was
    written, or the server refused the command while loading its data."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:  # the error, then what caused it
        exc = error
        seen.add(id(exc))
        if isinstance(exc, (redis.exceptions.BusyLoadingError, _Unsent)):
            return True
        text = str(exc)
        if "connecting to" in text or "Timeout connecting" in text:
            return True
        tb, innermost = exc.__traceback__, ""
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename.endswith(_CONNECTION_MODULE):
                if code.co_name in _OPENING:
                    return True
                innermost = code.co_name
            tb = tb.tb_next
        # redis-py writing on a connection another task closed meanwhile (its writer
        # gone): nothing was written.
        if isinstance(exc, AttributeError) and innermost in _SENDING and "writelines" in text:
            return True
        if isinstance(exc, _Spent):
            # The bound ran out: unsent if the command was still opening its connection.
            inner = exc.__cause__
            error = None if inner is None else inner.__cause__ or inner.__context__
            continue
        error = exc.__cause__
    return False


# redis-py's functions that open a connection, run its handshake or check its health
# before a command is written: an error raised inside one left the command unsent.
_OPENING: Final = frozenset({"connect", "connect_check_health", "on_connect", "on_connect_check_health",
                             "check_health", "_connect"})
_CONNECTION_MODULE: Final = "/redis/asyncio/connection.py"
_SENDING: Final = frozenset({"send_packed_command", "_send_packed_command"})


def _damaged(operation: str, session: str, keys: Sequence[bytes], exc: BaseException) -> NoReturn:
    """A script's refusal: ``DAMAGED <key> <what>`` (the key's index in ``keys``,
    1-based, or ``r <token>`` for a receipt) names a key something other than the
    store wrote, found before the script changed anything; anything else is Redis's
    own error."""
    text = str(exc)
    if not text.startswith("DAMAGED "):
        _fail(operation, session, exc)
    where, _, what = text[len("DAMAGED "):].partition(" ")
    if where == "r":
        token, _, what = what.partition(" ")
        key = keys[0][: keys[0].rindex(b"}:") + 2] + b"r" + token.encode()
    else:
        key = keys[int(where) - 1]
    _damaged_key(operation, session, key, what, exc)


def _damaged_key(
    operation: str, session: str, key: bytes, what: str, cause: BaseException | None = None
) -> NoReturn:
    raise StoreError(
        f"{operation} session {session!r} failed: key {key!r} {what}, which this store never writes "
        "(something else wrote it); nothing was changed"
    ) from cause


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
