"""Tests of the MongoDB store and its provisioner that the shared suite does not make.

They run against mongomock, an in-process FAKE of MongoDB: every test using it says
"fake" in its name. They check what the store sends and how it reacts to errors; they
do not show that a real MongoDB server behaves the same.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import bson
import mongomock
import pytest
from pymongo.errors import (
    AutoReconnect,
    DocumentTooLarge,
    DuplicateKeyError,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from reference_stores.mongodb import (
    INDEXES,
    MAX_DOCUMENT_BYTES,
    STEERS,
    TRANSCRIPTS,
    MongoStore,
)
from storetest._engine.servers import TestRun, Unavailable
from storetest._engine.servers import mongodb as provisioner
from storetest.codec import encode_message
from storetest.contract import Attachment, Message, StoreError, Text, ToolCall, ToolResult

pytest_plugins = ["pytester"]

ODD_KEYS_JSON = '{"a.b":1,"$set":{"x\\u0000y":2},"":3,"$":[],"a.b":4}'


@pytest.fixture
def fake_db() -> Any:
    """A mongomock database: a FAKE, not MongoDB."""
    return mongomock.MongoClient().db


@pytest.fixture
def fake_store(fake_db: Any) -> MongoStore:
    return MongoStore(fake_db)


def _broken_store(**methods: Exception) -> tuple[MongoStore, mock.MagicMock]:
    """A store whose collections raise the given driver errors (method name -> error)."""
    collection = mock.MagicMock(name="collection")
    for name, error in methods.items():
        getattr(collection, name).side_effect = error
    database = mock.MagicMock(name="database")
    database.__getitem__.return_value = collection
    return MongoStore(database), collection


# --- user data is values, kept verbatim (fake) ---------------------------------------


def test_fake_keys_with_dot_dollar_nul_in_user_data_round_trip(fake_store: MongoStore) -> None:
    """Tool arguments whose JSON keys hold '.', '$' and NUL come back byte for byte."""
    messages = [
        Message("assistant", (ToolCall("call.$1\x00", "$tool.name\x00", ODD_KEYS_JSON),)),
        Message("tool", (ToolResult("call.$1\x00", '{"$where":"1"}\x00', is_error=True),)),
        Message("user", (Text("$push.steers\x00"), Attachment("a/b.$", b"\x00\xff$."))),
    ]
    fake_store.save("s.$\x00", messages)
    assert fake_store.messages("s.$\x00") == messages
    assert fake_store.messages("s.$\x00")[0].content[0].arguments == ODD_KEYS_JSON  # type: ignore[union-attr]


def test_fake_messages_are_stored_as_strings_not_subdocuments(
    fake_store: MongoStore, fake_db: Any
) -> None:
    """The stored document holds encoded text only: no user key ever becomes a field name."""
    message = Message("assistant", (ToolCall("c", "t", ODD_KEYS_JSON),))
    fake_store.save("s", [message])
    (document,) = list(fake_db[TRANSCRIPTS].find({}, sort=[("_id", 1)]))
    assert set(document) == {"_id", "session", "messages"}
    assert document["messages"] == [encode_message(message)]


def test_fake_session_ids_are_exact_including_nul(fake_store: MongoStore) -> None:
    """Ids that differ by case, accent form, trailing space or a NUL are separate sessions."""
    ids = ["a", "A", "a ", "é", "e\u0301", "a\x00", "a\x00b", "\x00"]
    for i, session in enumerate(ids):
        fake_store.save(session, [Message.text("user", str(i))])
        fake_store.add_steer(session, f"steer {i}")
    for i, session in enumerate(ids):
        assert fake_store.messages(session) == [Message.text("user", str(i))]
        assert fake_store.take_steers(session) == [f"steer {i}"]


def test_fake_id_is_binary_utf8_so_collation_cannot_fold_it(
    fake_store: MongoStore, fake_db: Any
) -> None:
    """``_id`` is the id's UTF-8 bytes (binary), and the readable id is kept as a value."""
    fake_store.save("é\x00", [])
    document = fake_db[TRANSCRIPTS].find_one({"session": "é\x00"})
    assert bytes(document["_id"]) == "é\x00".encode()
    assert isinstance(document["_id"], bson.Binary)


def test_everything_sent_survives_pymongo_bson_encoding() -> None:
    """mongomock never encodes BSON; pymongo's real encoder must take every filter, update
    and document the store sends (NUL in ids and steers, odd keys in arguments) unchanged."""
    store, collection = _broken_store()
    collection.find_one_and_update.return_value = None
    collection.find_one.return_value = None
    session = "a\x00.$b"
    store.save(session, [Message("assistant", (ToolCall("c", "t", ODD_KEYS_JSON),))])
    store.messages(session)
    store.add_steer(session, "\x00$push.x")
    store.take_steers(session)
    sent = [
        arg
        for call in collection.method_calls
        for arg in [*call.args, *call.kwargs.values()]
        if isinstance(arg, dict)
    ]
    assert len(sent) == 9  # save 2, messages 2, add_steer 2, take_steers 3
    for spec in sent:
        raw = bson.encode(spec)  # raises InvalidDocument on a NUL or bad key
        assert bson.encode(bson.decode(raw)) == raw
    assert sent[0] == {"_id": bson.Binary(session.encode())}
    assert bson.decode(bson.encode(sent[1]))["_id"] == session.encode()
    assert bson.decode(bson.encode(sent[5]))["$push"] == {"steers": "\x00$push.x"}


# --- steers (fake: order and exactly-once for one thread only) -----------------------


def test_fake_steers_come_out_once_in_order(fake_store: MongoStore) -> None:
    for text in ["1", "2", "", "\x00", "2"]:
        fake_store.add_steer("s", text)
    assert fake_store.take_steers("s") == ["1", "2", "", "\x00", "2"]
    assert fake_store.take_steers("s") == []
    fake_store.add_steer("s", "after")
    assert fake_store.take_steers("s") == ["after"]


def test_fake_take_on_empty_queue_writes_nothing(fake_store: MongoStore, fake_db: Any) -> None:
    assert fake_store.take_steers("never") == []
    assert fake_db[STEERS].count_documents({}) == 0


def test_fake_replica_handle_sees_steers_and_transcript(fake_db: Any) -> None:
    one, two = MongoStore(fake_db), MongoStore(fake_db)
    one.add_steer("s", "x")
    one.save("s", [Message.text("user", "hi")])
    assert two.take_steers("s") == ["x"]
    assert one.take_steers("s") == []
    assert two.messages("s") == [Message.text("user", "hi")]


def test_fake_save_and_steers_do_not_rewrite_each_other(fake_store: MongoStore) -> None:
    fake_store.add_steer("s", "queued")
    fake_store.save("s", [Message.text("user", "a")])
    fake_store.save("s", [])
    assert fake_store.take_steers("s") == ["queued"]
    fake_store.save("s", [Message.text("user", "b")])
    fake_store.add_steer("s", "x")
    fake_store.take_steers("s")
    assert fake_store.messages("s") == [Message.text("user", "b")]


# --- the 16 MiB limit -----------------------------------------------------------------


def test_fake_oversized_transcript_names_session_and_size_and_writes_nothing(
    fake_store: MongoStore,
) -> None:
    before = [Message.text("user", "keep me")]
    fake_store.save("big-one", before)
    huge = [Message("user", (Attachment("application/octet-stream", b"\x01" * (13 * 2**20)),))]
    with pytest.raises(StoreError) as caught:
        fake_store.save("big-one", huge)
    message = str(caught.value)
    assert "'big-one'" in message
    size = int(message.split(" is ")[1].split(" bytes")[0])
    assert size > MAX_DOCUMENT_BYTES
    assert str(MAX_DOCUMENT_BYTES) in message
    assert fake_store.messages("big-one") == before


def test_fake_oversized_first_save_creates_no_document(
    fake_store: MongoStore, fake_db: Any
) -> None:
    huge = [Message.text("user", "x" * (MAX_DOCUMENT_BYTES + 1))]
    with pytest.raises(StoreError, match="nothing was written"):
        fake_store.save("new", huge)
    assert fake_db[TRANSCRIPTS].count_documents({}) == 0


def test_fake_transcript_just_under_the_limit_is_saved(fake_store: MongoStore) -> None:
    """The size check measures the real document, so a big-but-legal transcript is kept."""
    text = "y" * (MAX_DOCUMENT_BYTES - 200)
    fake_store.save("s", [Message.text("user", text)])
    assert fake_store.messages("s")[0].content[0] == Text(text)


def test_driver_document_too_large_is_wrapped_naming_session() -> None:
    store, _ = _broken_store(replace_one=DocumentTooLarge("BSON document too large"))
    with pytest.raises(StoreError, match=r"save for session 'sess-1'.*size limit") as caught:
        store.save("sess-1", [Message.text("user", "x")])
    assert isinstance(caught.value.__cause__, DocumentTooLarge)


# --- driver errors become StoreError ---------------------------------------------------


@pytest.mark.parametrize(
    ("method", "call", "operation"),
    [
        ("replace_one", lambda s: s.save("sess\x00x", []), "save"),
        ("find_one", lambda s: s.messages("sess\x00x"), "messages"),
        ("update_one", lambda s: s.add_steer("sess\x00x", "t"), "add_steer"),
        ("find_one_and_update", lambda s: s.take_steers("sess\x00x"), "take_steers"),
    ],
)
@pytest.mark.parametrize(
    "error",
    [
        ServerSelectionTimeoutError("no servers"),
        AutoReconnect("connection reset"),
        OperationFailure("not authorized", code=13),
    ],
    ids=["selection-timeout", "connection-lost", "operation-failure"],
)
def test_driver_errors_are_wrapped_naming_operation_and_session(
    method: str, call: Any, operation: str, error: Exception
) -> None:
    store, _ = _broken_store(**{method: error})
    with pytest.raises(StoreError) as caught:
        call(store)
    assert f"mongodb {operation} for session 'sess\\x00x'" in str(caught.value)
    assert caught.value.__cause__ is error


def test_upsert_race_is_retried_once() -> None:
    store, collection = _broken_store()
    collection.update_one.side_effect = [DuplicateKeyError("E11000"), None]
    store.add_steer("s", "t")
    assert collection.update_one.call_count == 2


def test_upsert_race_lost_twice_is_a_store_error() -> None:
    store, collection = _broken_store(replace_one=DuplicateKeyError("E11000"))
    with pytest.raises(StoreError, match="save for session 's'"):
        store.save("s", [])
    assert collection.replace_one.call_count == 2


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.save("", []),
        lambda s: s.save("s", [object()]),
        lambda s: s.messages(b"s"),
        lambda s: s.add_steer("s", "\ud800"),
        lambda s: s.add_steer("s", None),
        lambda s: s.take_steers("x" * 513),
    ],
    ids=["empty-id", "not-a-message", "bytes-id", "lone-surrogate", "none-text", "long-id"],
)
def test_bad_arguments_raise_before_touching_the_database(call: Any) -> None:
    store, collection = _broken_store()
    with pytest.raises((TypeError, ValueError)):
        call(store)
    assert collection.method_calls == []


def test_fake_corrupt_stored_message_is_a_store_error(fake_store: MongoStore, fake_db: Any) -> None:
    fake_store.save("s", [Message.text("user", "x")])
    fake_db[TRANSCRIPTS].update_one({"session": "s"}, {"$set": {"messages": ["{not json"]}})
    with pytest.raises(StoreError, match=r"session 's'.*message 0 is corrupt"):
        fake_store.messages("s")


def test_same_collection_for_both_is_refused(fake_db: Any) -> None:
    with pytest.raises(ValueError, match="different collections"):
        MongoStore(fake_db, transcripts="x", steers="x")


def test_indexes_name_the_collections_the_store_uses(fake_db: Any) -> None:
    store = MongoStore(fake_db)
    store.save("s", [])
    store.add_steer("s", "t")
    assert set(INDEXES) == set(fake_db.list_collection_names()) == {TRANSCRIPTS, STEERS}


# --- provisioning -------------------------------------------------------------------------


@pytest.fixture
def no_mongodb_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No URL, no Docker engine, no mongod: whatever this machine has."""
    monkeypatch.delenv("STORETEST_MONGODB_URL", raising=False)
    monkeypatch.delenv("STORETEST_REQUIRE", raising=False)
    monkeypatch.setattr(provisioner, "docker_engine_answers", lambda: False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def _run(tmp_path: Path) -> TestRun:
    return TestRun(private_dir=tmp_path / "private", shared_dir=tmp_path / "shared")


_FIXTURE_USER = """
def test_uses_mongodb(storetest_mongodb_url):
    assert storetest_mongodb_url.startswith("mongodb://")
"""


def test_fixture_skips_naming_the_ways_to_enable(
    pytester: pytest.Pytester, no_mongodb_here: None
) -> None:
    pytester.makepyfile(_FIXTURE_USER)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    skip_line = "\n".join(result.outlines)
    for way in ("STORETEST_MONGODB_URL", "Docker", "mongod", "fake, not"):
        assert way in skip_line, way


def test_fixture_fails_loudly_when_required(
    pytester: pytest.Pytester, no_mongodb_here: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORETEST_REQUIRE", "mongodb")
    pytester.makepyfile(_FIXTURE_USER)
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*mongodb is required (STORETEST_REQUIRE)*STORETEST_MONGODB_URL*"])


def test_provision_unavailable_names_the_ways(no_mongodb_here: None, tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match=r"STORETEST_MONGODB_URL.*Docker.*mongod.*fake"):
        next(provisioner.provision(_run(tmp_path)))


def test_provision_with_url_to_nothing_fails_fast_and_clearly(
    no_mongodb_here: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        monkeypatch.setenv(
            "STORETEST_MONGODB_URL",
            f"mongodb://user:secret@127.0.0.1:{port}/?serverSelectionTimeoutMS=300",
        )
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="STORETEST_MONGODB_URL names") as caught:
            next(provisioner.provision(_run(tmp_path)))
    assert time.monotonic() - started < 10
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert "secret" not in str(caught.value)


def test_fake_provision_with_url_yields_fresh_database_and_drops_it(
    no_mongodb_here: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The server is a FAKE (mongomock); checks the URL shape and the drop afterwards."""
    fake: Any = mongomock.MongoClient()
    seen: list[str] = []

    def fake_client(url: str) -> Any:
        seen.append(url)
        return fake

    monkeypatch.setattr(provisioner, "_client", fake_client)
    monkeypatch.setenv("STORETEST_MONGODB_URL", "mongodb://u:p@db.example:27017/app?tls=true")
    generator = provisioner.provision(_run(tmp_path))
    url = next(generator)
    prefix = "mongodb://u:p@db.example:27017/storetest_"
    assert url.startswith(prefix) and url.endswith("?tls=true&authSource=app"), url
    name = url.split("/")[3].split("?")[0]
    assert seen == [url]
    fake[name].t.insert_one({"x": 1})
    assert name in fake.list_database_names()
    assert next(generator, "done") == "done"
    assert name not in fake.list_database_names()
    again = provisioner.provision(_run(tmp_path))
    assert next(again) != url  # every run gets its own database


@pytest.mark.parametrize(
    ("base", "want"),
    [
        ("mongodb://h:1", "mongodb://h:1/n"),
        ("mongodb://h:1/", "mongodb://h:1/n"),
        ("mongodb://h:1/old?w=majority", "mongodb://h:1/n?w=majority"),
        ("mongodb://u:p@h:1", "mongodb://u:p@h:1/n?authSource=admin"),
        ("mongodb://u:p@h:1/?authSource=x", "mongodb://u:p@h:1/n?authSource=x"),
        (
            "mongodb://h1:1,h2:2/?replicaSet=rs&readPreferenceTags=dc:ny,rack:1",
            "mongodb://h1:1,h2:2/n?replicaSet=rs&readPreferenceTags=dc:ny,rack:1",
        ),
    ],
)
def test_fresh_database_url_keeps_options_and_auth_source(base: str, want: str) -> None:
    assert provisioner.fresh_database_url(base, "n") == want


def test_fresh_database_url_refuses_other_schemes() -> None:
    with pytest.raises(ValueError, match="not a mongodb"):
        provisioner.fresh_database_url("postgres://h/x", "n")


class _FakeContainer:
    instances: ClassVar[list[_FakeContainer]] = []

    def __init__(self, image: str) -> None:
        self.image, self.started, self.stopped = image, False, False
        _FakeContainer.instances.append(self)

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def get_connection_url(self) -> str:
        return "mongodb://test:test@localhost:32768"


def test_provision_with_docker_starts_and_stops_a_container(
    no_mongodb_here: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Docker path, with testcontainers replaced by a stand-in (no engine here)."""
    tc = pytest.importorskip("testcontainers.community.mongodb")
    monkeypatch.setattr(tc, "MongoDbContainer", _FakeContainer)
    monkeypatch.setattr(provisioner, "docker_engine_answers", lambda: True)
    _FakeContainer.instances.clear()
    generator = provisioner.provision(_run(tmp_path))
    url = next(generator)
    (container,) = _FakeContainer.instances
    assert container.image == "mongo:7" and container.started and not container.stopped
    assert url.startswith("mongodb://test:test@localhost:32768/storetest_")
    assert url.endswith("?authSource=admin")
    next(generator, None)
    assert container.stopped


def test_provision_with_a_mongod_that_dies_is_unavailable(
    no_mongodb_here: None, tmp_path: Path
) -> None:
    """A ``mongod`` on PATH that exits at once: reported, not waited on for a minute."""
    bin_dir = Path(os.environ["PATH"])
    bin_dir.mkdir()
    mongod = bin_dir / "mongod"
    mongod.write_text("#!/bin/sh\nexit 3\n")
    mongod.chmod(mongod.stat().st_mode | stat.S_IEXEC)
    started = time.monotonic()
    with pytest.raises(Unavailable, match="mongod exited with status 3"):
        next(provisioner.provision(_run(tmp_path)))
    assert time.monotonic() - started < 30

