"""The MongoDB store: pymongo on the :class:`~pymongo.database.Database` the application
already has. It creates nothing (no collections, no indexes) and needs no replica set.

How each MongoDB fact that breaks naive stores is handled:

- *Update operators may reorder fields; raw JSON stored as a sub-document is re-encoded
  (duplicate keys dropped, whitespace lost, integers of 2^63 and over raise).* Every
  message is stored as the text :func:`storetest.codec.encode_message` makes (a BSON
  string), so tool-call arguments are bytes inside a string the server never parses.
  User data is only ever a *value* (a string in an array, an id as binary), never a field
  name, so keys with ``.``, ``$`` or NUL in tool arguments cannot reach the server's
  field-name rules.
- *A key containing NUL is refused.* No user data is used as a key (above). Session ids
  are values too: ``_id`` is the id's UTF-8 bytes as BSON binary. A string ``_id`` would
  hold a NUL as well (BSON strings are length-prefixed), but binary is compared byte for
  byte whatever default collation the application gave the collection, where a string
  ``_id`` under a case-insensitive collation would make ``"a"`` and ``"A"`` one session.
- *Documents are limited to 16 MiB.* A transcript is one document, so :meth:`MongoStore.save`
  measures the BSON it is about to send and raises :class:`StoreError` naming the session
  and the size before writing anything; pymongo's ``DocumentTooLarge`` (and the server's
  own refusal) are wrapped the same way, should a server have a lower limit.
- *An atomic take without a replica set relies on single-document atomicity; ``find``
  without ``sort`` has no order.* Each session's steer queue is one array in one
  document: ``$push`` appends (upserting the document), and ``find_one_and_update`` empties
  the array and returns it as it was, in one atomic step on one document. Order is the
  array's order, never ``find`` order or ObjectId time. No multi-document transaction is
  used anywhere, so a standalone server is enough.

Transcripts and steer queues live in separate collections, so a save never rewrites the
queue and a steer never rewrites the transcript. A save does rewrite the whole transcript
document: the document is the unit MongoDB updates atomically without a replica set, so
unlike the SQL stores this one is not incremental (a save at turn 2,000 sends all 2,000
messages). Reads decode with :func:`storetest.codec.decode_trusted`: the documents hold
text this store encoded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import bson
from bson.binary import Binary
from bson.errors import BSONError
from pymongo import IndexModel, ReturnDocument
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DocumentTooLarge, DuplicateKeyError, PyMongoError

from storetest.codec import CodecError, decode_trusted, encode_message
from storetest.contract import (
    Message,
    StoreError,
    check_messages,
    check_session_id,
    check_steer_text,
)

__all__ = [
    "INDEXES",
    "MAX_DOCUMENT_BYTES",
    "STEERS",
    "TRANSCRIPTS",
    "MongoStore",
]

#: Default name of the collection holding one transcript document per session.
TRANSCRIPTS: Final = "storetest_transcripts"
#: Default name of the collection holding one steer-queue document per session.
STEERS: Final = "storetest_steers"

#: MongoDB's limit on one document (``maxBsonObjectSize``), in bytes.
MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024

#: What the application must create, per collection: nothing beyond the ``_id`` index
#: MongoDB gives every collection (every lookup is by ``_id``). MongoDB creates a
#: collection on its first write, so there is no DDL to run either; the mapping is here
#: so that a migration tool can iterate it and so the store's needs are stated, not implied.
INDEXES: Final[Mapping[str, Sequence[IndexModel]]] = {TRANSCRIPTS: (), STEERS: ()}

# Retry an upsert that lost an insert race once: the second try finds the document the
# winner inserted. MongoDB 4.2+ usually retries this itself for an ``_id`` equality match.
_UPSERT_ATTEMPTS: Final = 2


def _key(session: str) -> Binary:
    """The ``_id`` of a session's documents: its UTF-8 bytes, compared byte for byte."""
    return Binary(session.encode("utf-8"))


class MongoStore:
    """A synchronous store on a pymongo :class:`~pymongo.database.Database`.

    Writes and reads use the database's own write concern, read concern and read
    preference: give it ``w="majority"`` and a primary read preference for replicas that
    must see each other's writes through a failover. Every method is one single-document
    operation, hence atomic on a standalone server, a replica set or a sharded cluster
    (the shard key, if any, must be ``_id``).

    :param database: the database the application already has; nothing is created in it.
    :param transcripts: name of the transcripts collection.
    :param steers: name of the steer-queue collection (must differ from ``transcripts``).
    :raises ValueError: both collection names are the same.
    """

    def __init__(
        self,
        database: Database[Any],
        *,
        transcripts: str = TRANSCRIPTS,
        steers: str = STEERS,
    ) -> None:
        if transcripts == steers:
            raise ValueError(
                f"transcripts and steers must be different collections, both are {steers!r}; "
                "a save would overwrite the steer queue"
            )
        self.database = database
        self._transcripts: Collection[Any] = database[transcripts]
        self._steers: Collection[Any] = database[steers]

    def __repr__(self) -> str:
        return f"MongoStore({self.database.name!r})"

    def save(self, session: str, messages: Sequence[Message]) -> None:
        """Replace the session's transcript with ``messages`` in one ``replace_one``
        (upsert) of one document: a reader sees the old transcript or the new one.

        :raises StoreError: the transcript would exceed :data:`MAX_DOCUMENT_BYTES` (nothing
            is written), or the server failed.
        """
        session = check_session_id(session)
        checked = check_messages(messages)
        document = {
            "_id": _key(session),
            "session": session,
            "messages": [encode_message(m) for m in checked],
        }
        size = len(bson.encode(document))
        if size > MAX_DOCUMENT_BYTES:
            raise StoreError(
                f"mongodb save for session {session!r} refused: the transcript "
                f"({len(checked)} messages) is {size} bytes of BSON, over MongoDB's "
                f"{MAX_DOCUMENT_BYTES}-byte document limit; nothing was written"
            )
        with _wrapped("save", session):
            for attempt in range(1, _UPSERT_ATTEMPTS + 1):
                try:
                    self._transcripts.replace_one({"_id": document["_id"]}, document, upsert=True)
                    break
                except DuplicateKeyError:
                    if attempt == _UPSERT_ATTEMPTS:
                        raise

    def messages(self, session: str) -> list[Message]:
        """The transcript, read from one document; ``[]`` when there is none.

        :raises StoreError: the server failed, or the stored document is not one this
            store wrote.
        """
        session = check_session_id(session)
        with _wrapped("messages", session):
            document = self._transcripts.find_one({"_id": _key(session)}, {"messages": True})
        if document is None:
            return []
        stored = document.get("messages")
        if not isinstance(stored, list):
            raise StoreError(
                f"mongodb messages for session {session!r}: the stored document has no "
                f"'messages' array (found {type(stored).__name__})"
            )
        result: list[Message] = []
        for i, text in enumerate(stored):
            if not isinstance(text, str):
                raise StoreError(
                    f"mongodb messages for session {session!r}: message {i} is stored as "
                    f"{type(text).__name__}, not as encoded text"
                )
            try:
                result.append(decode_trusted(text))
            except CodecError as exc:
                raise StoreError(
                    f"mongodb messages for session {session!r}: message {i} is corrupt: {exc}"
                ) from exc
        return result

    def add_steer(self, session: str, text: str) -> None:
        """Append ``text`` to the session's queue: one ``$push`` on one document, upserted.

        :raises StoreError: the server failed.
        """
        session = check_session_id(session)
        text = check_steer_text(text)
        with _wrapped("add_steer", session):
            for attempt in range(1, _UPSERT_ATTEMPTS + 1):
                try:
                    self._steers.update_one(
                        {"_id": _key(session)},
                        {"$push": {"steers": text}, "$setOnInsert": {"session": session}},
                        upsert=True,
                    )
                    break
                except DuplicateKeyError:
                    if attempt == _UPSERT_ATTEMPTS:
                        raise

    def take_steers(self, session: str) -> list[str]:
        """Empty the session's queue and return what it held, oldest first, in one
        ``find_one_and_update`` on one document: concurrent takers, on any handle, each
        get a disjoint part of the queue. An empty queue is not written to.

        :raises StoreError: the server failed.
        """
        session = check_session_id(session)
        with _wrapped("take_steers", session):
            before = self._steers.find_one_and_update(
                {"_id": _key(session), "steers.0": {"$exists": True}},
                {"$set": {"steers": []}},
                projection={"steers": True},
                return_document=ReturnDocument.BEFORE,
            )
        if before is None:
            return []
        steers = before.get("steers")
        if not isinstance(steers, list) or not all(isinstance(s, str) for s in steers):
            raise StoreError(
                f"mongodb take_steers for session {session!r}: the stored queue is not an "
                "array of strings"
            )
        return steers


@contextmanager
def _wrapped(operation: str, session: str) -> Iterator[None]:
    """Turn driver errors into :class:`StoreError` naming the operation and the session."""
    try:
        yield
    except DocumentTooLarge as exc:
        raise StoreError(
            f"mongodb {operation} for session {session!r} failed: the document is over the "
            f"server's size limit ({exc}); nothing was written"
        ) from exc
    except (PyMongoError, BSONError) as exc:
        raise StoreError(
            f"mongodb {operation} for session {session!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
