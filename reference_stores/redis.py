"""The Redis store: the application's ``redis.asyncio`` client (``Redis`` or
``RedisCluster``), four keys per session, three Lua scripts.

How it keeps each Redis fact that breaks naive stores:

- Redis runs one command at a time, but a sequence of commands is not atomic: a take
  written as ``LRANGE`` then ``DEL`` hands a steer to two replicas (both read before
  either deletes), and a save written as ``DEL`` then ``RPUSH`` lets a reader see an
  empty or half-written transcript. Every operation here is one command or one Lua
  script, which Redis runs with nothing interleaved: a take is ``LRANGE`` and ``DEL``
  in one script, a save checks the version and rewrites in one script.
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
transcript raises; absent means never saved), ``:d`` the chain digests, 32 bytes per
message, concatenated, ``:m`` a list of the messages' :func:`encode_message` text,
``:s`` a list of steers. Saves write only what changed, through
:mod:`reference_stores._incremental`: the save script runs only if the stored version
is the one the handle planned for; when it is not (another handle wrote), the handle
reads the stored digests from the end of the prefix it shares (``GETRANGE``, one
range) and plans again. A save by the handle that wrote last is one round trip, and so
is a read (the version, the digests and every message from one script) and a take.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, NoReturn

import redis.asyncio
import redis.exceptions

from reference_stores._incremental import DEFAULT_CACHE_SESSIONS, DIGEST_SIZE, Remembered
from storetest.codec import CodecError, decode_trusted
from storetest.contract import (
    Message,
    OutcomeUnknown,
    StoreError,
    check_session_id,
    check_steer_text,
)

__all__ = ["DEFAULT_PREFIX", "RedisStore", "session_key"]

#: Where the store's keys go unless told otherwise.
DEFAULT_PREFIX: Final = "storetest:"

# KEYS: version, digests, messages. ARGV: the version planned for, rows kept, delete
# after them (1/0), raise the version (1/0), where to send digests from if the version
# is not the one planned for, the new rows' digests, their bodies. Returns {1, version}
# once done, or {0, stored version, stored digests from there on} having written nothing.
_SAVE: Final = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
if v ~= tonumber(ARGV[1]) then
  return {0, v, redis.call('GETRANGE', KEYS[2], tonumber(ARGV[5]) * 32, -1)}
end
local keep = tonumber(ARGV[2])
if ARGV[3] == '1' then
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
if ARGV[4] == '1' then
  v = v + 1
  redis.call('SET', KEYS[1], v)
end
return {1, v}
"""
# KEYS: version, digests. ARGV: the first position wanted.
_DIGESTS: Final = """
return {redis.call('GET', KEYS[1]) or '0', redis.call('GETRANGE', KEYS[2], tonumber(ARGV[1]) * 32, -1)}
"""
# KEYS: version, digests, messages: one snapshot of all three.
_READ: Final = """
return {redis.call('GET', KEYS[1]) or '0', redis.call('GET', KEYS[2]) or '', redis.call('LRANGE', KEYS[3], 0, -1)}
"""
# KEYS: steers.
_TAKE: Final = """
local taken = redis.call('LRANGE', KEYS[1], 0, -1)
if #taken > 0 then redis.call('DEL', KEYS[1]) end
return taken
"""

# The replies to a command that may have run are lost with these.
_LOST: Final = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError, TimeoutError)
_BACKEND_ERRORS: Final = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError, TimeoutError)


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

    :param client: a ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``, made on
        the event loop the store will be used from, without ``decode_responses=True``.
        The store never closes it.
    :param prefix: what every key starts with; it may hold no ``{`` or ``}``.
    :param cache_sessions: how many sessions to remember for incremental saves (least
        recently used are forgotten first); ``0`` disables it.
    :raises TypeError: ``client`` is a URL, a synchronous client or not a Redis client.
    :raises ValueError: the client decodes responses, the prefix holds a brace, or
        ``cache_sessions`` is negative.

    Every method raises ``TypeError``/``ValueError`` for bad arguments before sending
    anything, and :class:`~storetest.contract.StoreError` (from the driver's error)
    when Redis refuses, which has then changed nothing; or its subclass
    :class:`~storetest.contract.OutcomeUnknown` when the connection was lost once a
    write was sent.
    """

    def __init__(
        self, client: Any, *, prefix: str = DEFAULT_PREFIX, cache_sessions: int = DEFAULT_CACHE_SESSIONS
    ) -> None:
        _check_client(client)
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ValueError(
                f"prefix must be a str without '{{' or '}}' (the hash tag must be the session id), not {prefix!r}"
            )
        self._remembered = Remembered(cache_sessions)
        self._client = client
        self._prefix = prefix
        self._save = client.register_script(_SAVE)
        self._digests = client.register_script(_DIGESTS)
        self._read = client.register_script(_READ)
        self._take = client.register_script(_TAKE)

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
        # Plan for the version this handle knows (none: a new session). The script
        # refuses if another handle wrote since, and sends the stored version and the
        # digests the plan will ask for then: those from the row before the prefix.
        version = known.version if known is not None else 0
        stored: tuple[int, int, bytes] | None = None
        try:
            while True:
                plan.start(version)
                while plan.fetch_from is not None:
                    start = plan.fetch_from
                    if stored is not None and stored[1] == start:
                        blob = stored[2]
                    else:
                        found, blob = await self._digests(keys=keys[:2], args=[start])
                        if int(found) != version:
                            break  # written again in between: plan for the newer version
                    plan.resolve(_rows(start, blob))
                    stored = None
                if plan.fetch_from is not None:
                    version, stored = int(found), None
                    continue
                hint = max(plan.keep - 1, 0)
                args: list[Any] = [version, plan.keep, int(plan.delete), int(plan.changed), hint]
                if plan.rows:
                    args.append(b"".join(row[1] for row in plan.rows))
                    args.extend(row[2].encode("utf-8") for row in plan.rows)
                done, version, *rest = await self._save(keys=keys, args=args)
                if done:
                    break
                stored = (version, hint, rest[0])
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
        try:
            version, blob, bodies = await self._read(keys=keys)
        except _BACKEND_ERRORS as exc:
            _fail("read of", session, exc)
        try:
            # The store wrote these with encode_message: the trusted decoder skips
            # value checks they cannot fail.
            result = [decode_trusted(body.decode("utf-8")) for body in bodies]
        except (CodecError, UnicodeDecodeError) as exc:
            raise StoreError(f"read of session {session!r} failed: {exc}") from exc
        if len(blob) != len(result) * DIGEST_SIZE:
            raise StoreError(
                f"read of session {session!r} failed: {len(result)} messages but {len(blob)} bytes of digests; "
                "the keys were written by something other than this store"
            )
        if int(version):
            digests = (blob[o : o + DIGEST_SIZE] for o in range(0, len(blob), DIGEST_SIZE))
            self._remembered.learn_read(keys[0], int(version), list(result), digests)
        return result

    async def add_steer(self, session: str, text: str) -> None:
        """Queue one steer for the session."""
        session = check_session_id(session)
        data = check_steer_text(text).encode("utf-8")
        (key,) = self._keys(session, "s")
        try:
            await self._client.rpush(key, data)
        except _LOST as exc:
            _outcome_unknown("add_steer to", session, exc)
        except _BACKEND_ERRORS as exc:
            _fail("add_steer to", session, exc)

    async def take_steers(self, session: str) -> list[str]:
        """Remove and return every queued steer, oldest first; ``[]`` when none."""
        session = check_session_id(session)
        keys = self._keys(session, "s")
        try:
            taken = await self._take(keys=keys)
        except _LOST as exc:
            _outcome_unknown("take_steers from", session, exc)
        except _BACKEND_ERRORS as exc:
            _fail("take_steers from", session, exc)
        return [bytes(t).decode("utf-8") for t in taken]


def _check_client(client: object) -> None:
    if isinstance(client, (str, bytes)):
        raise TypeError(
            "RedisStore takes the application's redis.asyncio client, not a URL: "
            "pass redis.asyncio.Redis.from_url(url) (or redis.asyncio.RedisCluster.from_url(url))"
        )
    if not isinstance(client, (redis.asyncio.Redis, redis.asyncio.RedisCluster)):
        hint = (
            "; this one is synchronous: make it with redis.asyncio instead"
            if type(client).__module__.startswith("redis.")
            else ""
        )
        raise TypeError(
            f"RedisStore needs a redis.asyncio.Redis or redis.asyncio.RedisCluster, not "
            f"{type(client).__module__}.{type(client).__qualname__}{hint}"
        )
    if client.get_encoder().decode_responses:
        raise ValueError(
            "the client decodes responses (decode_responses=True), which turns the store's binary "
            "digests and values into text; give the store a client made without decode_responses"
        )


def _fail(operation: str, session: str, exc: BaseException) -> NoReturn:
    raise StoreError(f"{operation} session {session!r} failed: {_describe(exc)}") from exc


def _outcome_unknown(operation: str, session: str, exc: BaseException) -> NoReturn:
    raise OutcomeUnknown(
        f"{operation} session {session!r} may or may not have taken effect: the connection to Redis "
        f"was lost once the command was sent ({_describe(exc)})"
    ) from exc


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
