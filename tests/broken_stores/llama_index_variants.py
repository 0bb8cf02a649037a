"""Broken LlamaIndex chat stores: the correct SQLite ``BaseChatStore`` of
``tests/llama_index_stores.py`` (which passes every clause of its binding) changed in one
place each, to carry one bug seen in LlamaIndex's own stores."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from llama_index.core.llms import ChatMessage

from storetest import llama_index_chat_stores
from tests.broken_stores import BrokenStore
from tests.llama_index_stores import SQLiteChatStore


class RestReversed(SQLiteChatStore):
    """``delete_message`` reads the list, drops the message and writes the rest back with
    ``LPUSH`` (``RedisChatStore``): the messages left come back reversed."""

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        messages = self.get_messages(key)
        if not 0 <= idx < len(messages):
            return None
        removed = messages.pop(idx)
        self.set_messages(key, messages[::-1])
        return removed


class LastAsBytes(SQLiteChatStore):
    """``delete_last_message`` returns what the backend held, raw JSON bytes
    (``RedisChatStore``'s ``RPOP``), not a ``ChatMessage``."""

    def delete_last_message(self, key: str) -> Any:
        got = super().delete_last_message(key)
        return None if got is None else got.model_dump_json().encode()


class NegativeAsPosition(SQLiteChatStore):
    """A negative index taken as a position from the start (``OFFSET abs(idx)``)."""

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        return super().delete_message(key, abs(idx))


class EveryKeyOfTheBackend(SQLiteChatStore):
    """``get_keys`` lists the keys of every store in the directory (``KEYS *`` over a
    Redis database other applications share)."""

    def get_keys(self) -> list[str]:
        out: list[str] = []
        for path in sorted(Path(self.path).parent.glob("*.db")):
            out += SQLiteChatStore(path=str(path)).get_keys()
        return out


class DeletedKeysKept(SQLiteChatStore):
    """``get_keys`` reads a list of keys that ``add_message`` fills and
    ``delete_messages`` never empties."""

    ever: ClassVar[dict[str, list[str]]] = {}

    def add_message(self, key: str, message: ChatMessage) -> None:
        super().add_message(key, message)
        known = self.ever.setdefault(self.path, [])
        if key not in known:
            known.append(key)

    def get_keys(self) -> list[str]:
        return [*dict.fromkeys([*super().get_keys(), *self.ever.get(self.path, [])])]


class DeleteUnderSlash(SQLiteChatStore):
    """``delete_messages`` also deletes the keys under ``<key>/`` (keys as paths, a
    conversation's sub-threads deleted with it; an object store's ``Prefix=key``
    listing): deleting ``x`` empties ``x/y``. Reads are exact."""

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        return [ChatMessage.model_validate_json(str(v)) for (v,) in self._run(
            "DELETE FROM m WHERE k = ?1 OR substr(k, 1, length(?1) + 1) = ?1 || '/' RETURNING v", key)] or None


class SetAppends(SQLiteChatStore):
    """``set_messages`` inserts the new list without deleting the old one
    (``SQLiteChatStore`` of llama-index-storage-chat-store-sqlite)."""

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        for message in messages:
            self.add_message(key, message)


class SetInSteps(SQLiteChatStore):
    """``set_messages`` as ``delete_messages``, then one ``add_message`` per message, each
    its own commit (``RedisChatStore``, ``SQLAlchemyChatStore``)."""

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        self.delete_messages(key)
        for message in messages:
            time.sleep(0)  # the round trip between two writes
            self.add_message(key, message)


class MessageInTwoWrites(SQLiteChatStore):
    """``add_message`` writes a message's JSON in two commits (a value written in chunks):
    a process killed between them leaves half a message, which no later read parses."""

    def add_message(self, key: str, message: ChatMessage) -> None:
        text = message.model_dump_json()
        self._run("SELECT 1", many=[(key, text[: len(text) // 2])])
        self._run("UPDATE m SET v = v || ? WHERE n = (SELECT MAX(n) FROM m WHERE k = ?)", text[len(text) // 2:], key)


def halves_store(tmp_path: Path) -> SQLiteChatStore:
    return MessageInTwoWrites(path=str(tmp_path / "chat.db"))


#: Module level: the crash clause's helper process imports it by name to reopen the data.
halves = llama_index_chat_stores(halves_store)


def _factory(cls: type[SQLiteChatStore]) -> Any:
    def store(tmp_path: Path) -> SQLiteChatStore:
        return cls(path=str(tmp_path / "chat.db"))

    def neighbour(tmp_path: Path) -> SQLiteChatStore:
        return SQLiteChatStore(path=str(tmp_path / "another-app.db"))

    store.__name__ = store.__qualname__ = f"{cls.__name__}_store"
    return llama_index_chat_stores(store, neighbour=neighbour)


def control(tmp_path: Path) -> SQLiteChatStore:
    """The correct store every variant changes."""
    return SQLiteChatStore(path=str(tmp_path / "chat.db"))


def control_neighbour(tmp_path: Path) -> SQLiteChatStore:
    return SQLiteChatStore(path=str(tmp_path / "another-app.db"))


def _broken(name: str, bug: str, wild: str, clause: str, diagnosis: str, cls: type[SQLiteChatStore],
            racy: bool = False) -> BrokenStore:
    return BrokenStore(name, bug, wild, clause, diagnosis, _factory(cls), racy=racy)


BROKEN = [
    _broken("llama-delete-message-rest-reversed", "delete_message writes the rest of the list back reversed",
            "LlamaIndex RedisChatStore.delete_message (LPUSH of the rest)", "delete_message_removes_that_one",
            "delete_message(key, 0) on 5 messages", RestReversed),
    _broken("llama-delete-last-as-bytes", "delete_last_message returns raw bytes, not a ChatMessage",
            "LlamaIndex RedisChatStore.delete_last_message (RPOP)", "pop_item_takes_the_newest",
            "pop_item() returned", LastAsBytes),
    _broken("llama-negative-index-as-position", "delete_message(key, -1) deletes message 1",
            "an OFFSET or array slice given the index unchecked", "delete_message_with_a_negative_index",
            "beyond the protocol's promise: ", NegativeAsPosition),
    _broken("llama-get-keys-every-key", "get_keys lists every key of the backend, other applications' too",
            "LlamaIndex RedisChatStore.get_keys (KEYS *)", "get_keys_lists_the_keys_written",
            "another application's store wrote", EveryKeyOfTheBackend),
    _broken("llama-get-keys-deleted", "get_keys lists keys whose messages were deleted",
            "a key list kept beside the messages, never pruned", "get_keys_lists_the_keys_written",
            "whose messages delete_messages() removed", DeletedKeysKept),
    _broken("llama-delete-under-slash", "delete_messages(key) also deletes the keys under key/",
            "keys as paths, sub-threads deleted with their parent; a Prefix= listing", "clear_session_empties_it",
            "(x and x/y)", DeleteUnderSlash),
    _broken("llama-set-messages-appends", "set_messages adds the new list after the old one",
            "LlamaIndex SQLiteChatStore.set_messages", "set_messages_replaces_the_list",
            "after set_messages() of a shorter list", SetAppends),
    _broken("llama-set-messages-in-steps", "set_messages deletes, then adds message by message",
            "LlamaIndex RedisChatStore and SQLAlchemyChatStore.set_messages", "set_messages_is_atomic_to_readers",
            "beyond the protocol's promise: ", SetInSteps, racy=True),
    BrokenStore("llama-message-in-two-writes", "add_message writes a message in two commits",
                "a value written in chunks (an append of its tail)", "items_survive_a_crash",
                "get_items() raised", halves, reopen=halves),
]
