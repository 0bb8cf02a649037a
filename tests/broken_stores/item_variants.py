"""Broken item histories: the correct memory session of ``tests/item_histories.py``
changed in one place each, to carry one bug seen in agent SDKs' session stores."""

from __future__ import annotations

import asyncio
import copy
import fnmatch
import json
from pathlib import Path
from typing import Any

from storetest import item_sessions
from tests.broken_stores import BrokenStore
from tests.item_histories import MemorySession, SQLiteItemSession, backend_for


class PopWithoutLock(MemorySession):
    """Reads the newest item, then deletes it in a second step, with no lock."""

    async def pop_item(self) -> Any:
        if not self.items:
            return None
        newest = copy.deepcopy(self.items[-1])
        await asyncio.sleep(0)  # the round trip between the SELECT and the DELETE
        if self.items:
            self.items.pop()
        return newest


class LimitReturnsOldest(MemorySession):
    """``ORDER BY id LIMIT n``: the first ``n`` items, not the last."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        everything = await super().get_items()
        return everything if limit is None else everything[:limit]


class LimitZeroIsNone(MemorySession):
    """``if limit:`` where ``if limit is not None:`` was meant: ``get_items(0)`` returns
    every item (``LIMIT 0`` read as no limit)."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await super().get_items(limit or None)


class ClearByPrefix(MemorySession):
    """``clear_session`` deletes every key starting with the session's key (``SCAN MATCH
    key*`` then ``DEL``): clearing ``x`` also clears ``x:messages``."""

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self.histories = backend[1]

    async def clear_session(self) -> None:
        async with self.lock:
            await asyncio.sleep(0)
            for key, items in self.histories.items():
                if key.startswith(self.session_id):
                    items.clear()


class ClearUnderSlash(ClearByPrefix):
    """Items kept at ``<id>/<n>`` in an object store or a key-value store, cleared by
    deleting the key prefix ``<id>`` (``SCAN MATCH <id>*``, ``list_objects(Prefix=id)``):
    reads are exact, but clearing ``x`` also clears ``x/y``. Only ids under ``/`` and
    ``.`` go (no ``:``, no bare prefix), so the old clauses' ids never showed it."""

    async def clear_session(self) -> None:
        async with self.lock:
            await asyncio.sleep(0)
            for key, items in self.histories.items():
                if key == self.session_id or key.startswith((f"{self.session_id}/", f"{self.session_id}.")):
                    items.clear()


class BatchItemByItem(MemorySession):
    """One write per item (``RPUSH`` per item, ``INSERT``s in autocommit)."""

    async def add_items(self, items: list[Any]) -> None:
        for item in items:
            await super().add_items([item])


class CheckThenInsertSessionRow(MemorySession):
    """On the first write, finds no session and inserts the session with its first
    batch (an upsert of a new document): first writers arriving together each write
    their own batch as the whole history, and all but one batch are lost."""

    def __init__(self, backend: Any, session_id: str) -> None:
        self.session_id, (self.lock, self.histories) = session_id, backend

    @property
    def items(self) -> list[Any]:  # type: ignore[override]
        return self.histories.setdefault(self.session_id, [])  # type: ignore[no-any-return]

    async def add_items(self, items: list[Any]) -> None:
        if not self.histories.get(self.session_id):
            await asyncio.sleep(0)  # the round trip between the lookup and the insert
            self.histories[self.session_id] = copy.deepcopy(items)
            return
        async with self.lock:
            await asyncio.sleep(0)
            self.items.extend(copy.deepcopy(items))


class ArgumentsThroughJson(MemorySession):
    """Parses and dumps ``arguments`` (a ``jsonb`` column, ``json.loads`` on the way in)."""

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items([_reparsed(i) for i in items])


def _reparsed(item: Any) -> Any:
    if isinstance(item, dict) and isinstance(item.get("arguments"), str):
        try:
            return {**item, "arguments": json.dumps(json.loads(item["arguments"]))}
        except ValueError:
            return item
    return item


class WholeFloatsAsIntegers(MemorySession):
    """A codec that writes ``1.0`` as ``1`` (JavaScript's ``JSON.stringify``)."""

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(_ints(items))


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    return value


class CaseInsensitiveIds(MemorySession):
    """Ids compared case-insensitively (MariaDB's default collation)."""

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id.lower())
        self.session_id = session_id


class KeysMatchedByPattern(MemorySession):
    """One key per item, ``prefix:<id>:<n>``, read back with ``SCAN MATCH prefix:<id>:*``:
    session ``x`` also reads ``x:messages``'s items, and ``x*`` reads ``xa``'s."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        keys = self._keys()
        found = sorted(k for k in keys if fnmatch.fnmatchcase(k, f"p:{self.session_id}:*"))
        chosen = [copy.deepcopy(keys[k]) for k in found]
        return chosen if limit is None else chosen[-limit:] if limit else []

    async def add_items(self, items: list[Any]) -> None:
        keys = self._keys()
        mine = [k for k in keys if k.startswith(f"p:{self.session_id}:")]
        for n, item in enumerate(items, start=len(mine)):
            keys[f"p:{self.session_id}:{n:08d}"] = copy.deepcopy(item)

    def _keys(self) -> dict[str, Any]:
        return self.items_backend.setdefault("keys", {})  # type: ignore[no-any-return]

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self.items_backend = backend[1]


class ClearRacesAdd(MemorySession):
    """``add_items`` makes sure of the session row, then inserts under it; a clear in
    between deletes the row, and the insert fails its foreign key (``SQLAlchemySession``
    on Postgres)."""

    async def add_items(self, items: list[Any]) -> None:
        rows = self.items_rows()
        rows.add(self.session_id)
        await asyncio.sleep(0)  # the round trip between the two statements
        if self.session_id not in rows:
            raise RuntimeError('IntegrityError: insert on table "agent_messages" violates foreign key constraint')
        await super().add_items(items)

    async def clear_session(self) -> None:
        self.items_rows().discard(self.session_id)
        await super().clear_session()

    def items_rows(self) -> set[str]:
        return self._histories.setdefault("rows", set())  # type: ignore[no-any-return]

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self._histories = backend[1]


class PopTakesTheOldest(MemorySession):
    """``ORDER BY id LIMIT 1`` with no ``DESC`` (``LPOP`` for ``RPOP``)."""

    async def pop_item(self) -> Any:
        async with self.lock:
            return self.items.pop(0) if self.items else None


class ClearHidesItems(MemorySession):
    """Clearing deletes the session row only; the item rows stay (no ``ON DELETE
    CASCADE``), and the next add brings them back."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return [] if self.session_id in self._cleared() else await super().get_items(limit)

    async def pop_item(self) -> Any:
        return None if self.session_id in self._cleared() else await super().pop_item()

    async def add_items(self, items: list[Any]) -> None:
        self._cleared().discard(self.session_id)
        await super().add_items(items)

    async def clear_session(self) -> None:
        self._cleared().add(self.session_id)

    def _cleared(self) -> set[str]:
        return self._histories.setdefault("cleared", set())  # type: ignore[no-any-return]

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self._histories = backend[1]


class UnknownSessionRaises(MemorySession):
    """Looks the session row up and raises when it is missing."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if not self.items:
            raise KeyError(f"no session {self.session_id!r}")
        return await super().get_items(limit)


class KeepsTheCallersItems(MemorySession):
    """Keeps the dicts it was given (an in-memory store without a copy)."""

    async def add_items(self, items: list[Any]) -> None:
        async with self.lock:
            self.items += items


class CachedPerHandle(MemorySession):
    """Caches each session's items in the handle after the first read, kept up to date
    with this handle's own writes only."""

    def __init__(self, backend: Any, session_id: str, cache: dict[str, list[Any]]) -> None:
        super().__init__(backend, session_id)
        self.cache = cache

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if self.session_id not in self.cache:
            self.cache[self.session_id] = await super().get_items()
        got = copy.deepcopy(self.cache[self.session_id])
        return got if limit is None else got[-limit:] if limit else []

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        self.cache.setdefault(self.session_id, []).extend(copy.deepcopy(items))

    async def pop_item(self) -> Any:
        popped = await super().pop_item()
        self.cache.pop(self.session_id, None)
        return popped

    async def clear_session(self) -> None:
        await super().clear_session()
        self.cache.pop(self.session_id, None)


class TextColumn64K(MemorySession):
    """Items in a ``TEXT`` column (65,535 bytes) with strict mode: longer ones refused."""

    async def add_items(self, items: list[Any]) -> None:
        for item in items:
            if len(json.dumps(item).encode()) > 65_535:
                raise RuntimeError("(1406, \"Data too long for column 'message_data' at row 1\")")
        await super().add_items(items)


class JsonbRefusesNul(MemorySession):
    """Items in a ``jsonb`` column, which refuses ``\\u0000``."""

    async def add_items(self, items: list[Any]) -> None:
        if any("\\u0000" in json.dumps(i) for i in items):
            raise RuntimeError("unsupported Unicode escape sequence: \\u0000 cannot be converted to text")
        await super().add_items(items)


class ReadWithoutOrderBy(MemorySession):
    """Reads rows in the order of an index on the item's text, not in insertion order."""

    async def get_items(self, limit: int | None = None) -> list[Any]:
        everything = sorted(await super().get_items(), key=json.dumps)
        return everything if limit is None else everything[-limit:] if limit else []


class PopLeavesTheCountStale(MemorySession):
    """Keeps a per-session item count for limited reads (``OFFSET count - limit``),
    raised by adds and reset by clears but not lowered by pops."""

    def _counts(self) -> dict[str, int]:
        return self._histories.setdefault("counts", {})  # type: ignore[no-any-return]

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self._histories = backend[1]

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        self._counts()[self.session_id] = self._counts().get(self.session_id, 0) + len(items)

    async def clear_session(self) -> None:
        await super().clear_session()
        self._counts()[self.session_id] = 0

    async def get_items(self, limit: int | None = None) -> list[Any]:
        everything = await super().get_items()
        if limit is None:
            return everything
        count = self._counts().get(self.session_id, 0)
        return everything[max(0, count - limit):count] if limit else []


class ArgumentsCutAt512K(MemorySession):
    """Raw ``arguments`` kept to their first 524,288 bytes (a per-field cap of 512 KiB),
    cut at a byte, so a multibyte character there is dropped whole: the 256 KiB
    arguments of ``large_items_round_trip`` fit, the input model's 1 MiB ones do not."""

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items([_cut_arguments(i) for i in items])


def _cut_arguments(item: Any) -> Any:
    if isinstance(item, dict) and isinstance(item.get("arguments"), str):
        raw = item["arguments"].encode()
        if len(raw) > 2**19:
            return {**item, "arguments": raw[: 2**19].decode("utf-8", "ignore")}
    return item


def _opener(cls: type) -> Any:
    async def outer(tmp_path: Path) -> Any:
        backend = backend_for(tmp_path)
        return lambda session_id: cls(backend, session_id)

    outer.__name__ = outer.__qualname__ = f"{cls.__name__}_sessions"
    return outer


async def cached_per_handle(tmp_path: Path) -> Any:
    backend, cache = backend_for(tmp_path), {}
    return lambda session_id: CachedPerHandle(backend, session_id, cache)


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, cls: type | None = None,
            outer: Any = None, racy: bool = False) -> BrokenStore:
    return BrokenStore(name, bug, wild, clause, diagnosis, item_sessions(outer or _opener(cls)), racy=racy)  # type: ignore[arg-type]


BROKEN = [
    _broken("items-pop-without-lock", "pop_item reads the newest item, then deletes it, with no lock",
            "openai-agents-python #4205", "pop_item_hands_each_item_out_once", "duplicated",
            PopWithoutLock, racy=True),
    _broken("items-limit-returns-oldest", "get_items(n) returns the first n items", "ORDER BY id LIMIT n",
            "get_items_gives_the_latest", "returned the oldest", LimitReturnsOldest),
    _broken("items-limit-zero-is-none", "get_items(0) returns every item (`if limit:`)",
            "`if limit:` where `if limit is not None:` was meant", "get_items_gives_the_latest",
            "LIMIT 0 read as no limit", LimitZeroIsNone),
    _broken("items-batch-item-by-item", "add_items writes one item per command",
            "RPUSH per item; INSERTs in autocommit", "a_batch_is_atomic_to_readers", "item by item",
            BatchItemByItem, racy=True),
    _broken("items-batches-interleave", "add_items writes one item per command, so replicas' batches mix",
            "LangChain RedisChatMessageHistory", "concurrent_batches_never_interleave", "item by item",
            BatchItemByItem, racy=True),
    _broken("items-check-then-insert", "the first write checks for the session, then creates it",
            "openai-agents-python #2722", "concurrent_adds_lose_nothing", "lost", CheckThenInsertSessionRow,
            racy=True),
    _broken("items-arguments-through-json", "function_call arguments parsed and dumped again",
            "a jsonb column; json.loads on the way in", "items_round_trip_exactly", "raw JSON re-encoded",
            ArgumentsThroughJson),
    _broken("items-whole-floats-as-ints", "1.0 written as 1", "JSON.stringify; a numeric column",
            "items_round_trip_exactly", "came back as the integer", WholeFloatsAsIntegers),
    _broken("items-ids-case-insensitive", "session ids compared case-insensitively",
            "MariaDB's default collation", "item_sessions_are_isolated", "differ only by case", CaseInsensitiveIds),
    _broken("items-keys-by-pattern", "one key per item, read back by SCAN MATCH prefix:<id>:*",
            "Redis stores keyed prefix:id and prefix:id:messages", "item_sessions_are_isolated", "key scheme",
            KeysMatchedByPattern),
    _broken("items-clear-races-add", "add_items checks the session row, then inserts under it",
            "SQLAlchemySession on Postgres (IntegrityError)", "clear_racing_add_lands_before_or_after",
            "raised RuntimeError: IntegrityError", ClearRacesAdd, racy=True),
    _broken("items-pop-takes-oldest", "pop_item removes the oldest item", "ORDER BY id LIMIT 1; LPOP for RPOP",
            "pop_item_takes_the_newest", "the oldest", PopTakesTheOldest),
    _broken("items-clear-hides-items", "clear deletes the session row, not the items",
            "no ON DELETE CASCADE", "clear_session_empties_it", "belong to this session before its clear",
            ClearHidesItems),
    _broken("items-unknown-session-raises", "get_items raises for a session with no row",
            "a .one() on the session row", "never_used_item_session_is_empty", "raised KeyError",
            UnknownSessionRaises),
    _broken("items-keeps-callers-dicts", "add_items keeps the caller's dicts", "in-memory stores",
            "items_are_not_aliased", "changed the store", KeepsTheCallersItems),
    _broken("items-cached-per-handle", "each handle caches items, updated by its own writes only",
            "a per-process cache", "item_replicas_see_each_others_writes", "read through the",
            outer=cached_per_handle),
    _broken("items-text-column-64k", "items in a 64 KiB TEXT column", "SQLAlchemySession on MariaDB",
            "large_items_round_trip", "Data too long", TextColumn64K),
    _broken("items-jsonb-refuses-nul", "items in a jsonb column, which refuses \\u0000",
            "Postgres jsonb", "items_keep_nul_characters", "unsupported Unicode escape", JsonbRefusesNul),
    _broken("items-read-without-order-by", "get_items without ORDER BY", "rows in index order",
            "items_keep_their_order", "different order", ReadWithoutOrderBy),
    _broken("items-arguments-cut-at-512-kib", "raw arguments cut at 524,288 bytes",
            "a per-field size cap (512 KiB) of a document or key-value store", "item_fields_round_trip_at_every_size",
            "truncated at", ArgumentsCutAt512K),
    _broken("items-pop-leaves-count-stale", "a stored item count that pop_item does not lower",
            "a counter column or Redis counter key", "pop_item_takes_the_newest", "the read started past the items",
            PopLeavesTheCountStale),
]


class SQLiteItemByItem(SQLiteItemSession):
    """The correct SQLite history, but each item of a batch in its own transaction,
    with a round trip's pause between them (as a networked store has per command)."""

    async def add_items(self, items: list[Any]) -> None:
        for item in items:
            await super().add_items([item])
            await asyncio.sleep(0.002)


def sqlite_item_by_item_sessions(tmp_path: Path) -> Any:
    return lambda session_id: SQLiteItemByItem(session_id, tmp_path / "items.db")


BROKEN.append(_broken(
    "items-processes-item-by-item", "batches written one item per transaction, by several processes",
    "SQLite stores with autocommit INSERTs", "adds_from_processes_land_whole", "item by item",
    outer=sqlite_item_by_item_sessions))


class KeyTypesCollide(MemorySession):
    """Redis-style keys, a metadata hash at ``p:<id>`` and the item list at
    ``p:<id>:messages``: session ``x:messages``'s hash is session ``x``'s list, so
    whichever comes second is refused with ``WRONGTYPE``."""

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self.keys: dict[str, Any] = backend[1].setdefault("redis-keys", {})

    def _typed(self, key: str, kind: type) -> Any:
        value = self.keys.setdefault(key, kind())
        if not isinstance(value, kind):
            raise RuntimeError(f"WRONGTYPE Operation against a key holding the wrong kind of value ({key!r})")
        return value

    async def add_items(self, items: list[Any]) -> None:
        self._typed(f"p:{self.session_id}", dict)["created"] = 1
        self._typed(f"p:{self.session_id}:messages", list).extend(copy.deepcopy(items))

    async def get_items(self, limit: int | None = None) -> list[Any]:
        value = self.keys.get(f"p:{self.session_id}:messages", [])
        chosen = copy.deepcopy(value) if isinstance(value, list) else []
        return chosen if limit is None else chosen[-limit:] if limit else []


BROKEN.append(_broken(
    "items-key-types-collide", "a metadata key p:<id> and an item list p:<id>:messages",
    "RedisSession (session x:messages after x: WRONGTYPE)", "item_sessions_are_isolated",
    "refused only when other sessions existed", KeyTypesCollide))


# --- topologies: several handles, several factory calls, several racers of a kind ----------


class PopUnderHandleLock(MemorySession):
    """``pop_item`` in two statements (read the newest, then delete the newest) under a
    lock per handle: callers on one handle wait for each other, callers on two handles
    both read the same newest item."""

    def __init__(self, backend: Any, session_id: str, handle_lock: asyncio.Lock) -> None:
        super().__init__(backend, session_id)
        self.handle_lock = handle_lock

    async def pop_item(self) -> Any:
        async with self.handle_lock:
            if not self.items:
                return None
            newest = copy.deepcopy(self.items[-1])
            await asyncio.sleep(0)  # the round trip between the SELECT and the DELETE
            if self.items:
                self.items.pop()
            return newest


async def pop_under_handle_lock(tmp_path: Path) -> Any:
    backend, lock = backend_for(tmp_path), asyncio.Lock()  # one lock per factory call: per handle
    return lambda session_id: PopUnderHandleLock(backend, session_id, lock)


class SessionRowCheckedAfterClear(MemorySession):
    """``add_items`` looks for the session row and inserts it when missing, then its
    items; ``clear_session`` deletes the row. One add racing a clear always works (the
    add finds the row, or finds none and inserts it alone); two adds after a clear both
    find no row, and the second insert violates the primary key."""

    def __init__(self, backend: Any, session_id: str) -> None:
        super().__init__(backend, session_id)
        self.rows: set[str] = backend[1].setdefault("session-rows", set())

    async def add_items(self, items: list[Any]) -> None:
        if self.session_id not in self.rows:
            await asyncio.sleep(0)  # the round trip between the SELECT and the INSERT
            if self.session_id in self.rows:
                raise RuntimeError("IntegrityError: duplicate key value violates unique constraint "
                                   '"agent_sessions_pkey"')
            self.rows.add(self.session_id)
        await super().add_items(items)

    async def clear_session(self) -> None:
        self.rows.discard(self.session_id)
        await super().clear_session()


class ClassLevelCache(MemorySession):
    """Keeps what it last wrote or read of each session in a class attribute, shared by
    every instance of every factory call, and reads from it first: a store on a second,
    fresh backend serves the first backend's items for the same session id."""

    last: dict[str, list[Any]] = {}  # noqa: RUF012 - the bug: one dict for every backend

    async def get_items(self, limit: int | None = None) -> list[Any]:
        if self.session_id not in ClassLevelCache.last:
            ClassLevelCache.last[self.session_id] = await super().get_items()
        got = copy.deepcopy(ClassLevelCache.last[self.session_id])
        return got if limit is None else got[-limit:] if limit else []

    async def add_items(self, items: list[Any]) -> None:
        await super().add_items(items)
        ClassLevelCache.last[self.session_id] = await super().get_items()

    async def pop_item(self) -> Any:
        popped = await super().pop_item()
        ClassLevelCache.last[self.session_id] = await super().get_items()
        return popped

    async def clear_session(self) -> None:
        await super().clear_session()
        ClassLevelCache.last[self.session_id] = []


BROKEN += [
    _broken("items-pop-under-handle-lock", "pop_item reads, then deletes, under a lock per handle",
            "a per-instance asyncio.Lock around two statements", "pop_item_hands_each_item_out_once",
            "duplicated", outer=pop_under_handle_lock, racy=True),
    _broken("items-clear-then-adders-insert-row", "after a clear, each add inserts the missing session row",
            "SQLAlchemySession on Postgres (IntegrityError with several adders)",
            "clear_racing_add_lands_before_or_after", "raised RuntimeError: IntegrityError: duplicate key",
            SessionRowCheckedAfterClear, racy=True),
    _broken("items-clear-by-pattern", "clear_session deletes every key matching the session's key*",
            "Redis SCAN MATCH key* then DEL", "clear_session_empties_it", "clearing another session",
            ClearByPrefix),
    _broken("items-clear-under-slash", "clear_session deletes the key prefix <id>/ and <id>. too",
            "object and key-value stores keyed <id>/<n>, cleared by prefix", "clear_session_empties_it",
            "took the items of", ClearUnderSlash),
    _broken("items-class-level-cache", "what a session last held, in a class attribute shared by every store",
            "a module- or class-level cache", "item_factory_calls_share_only_their_backend",
            "a store on another backend", ClassLevelCache),
]
