"""The durable session handle: open or resume, the four audiences, branch, fork,
compact, events only after the change is durable, and a second process that rebuilds
the same model history."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from reference_stores.durable import BRANCH_KIND, DurableSession, Ephemeral, Event, Meta
from reference_stores.jsonl_log import JsonlLogStore
from reference_stores.memory_log import MemoryLogStore
from reference_stores.sqlite_log import SQLiteLogStore
from storetest.codec import encode_message
from storetest.contract import Message, StoreError
from storetest.entries import Custom, Entry, SessionExists

ROOT = Path(__file__).resolve().parent.parent


def user(text: str) -> Message:
    return Message.text("user", text)


def said(messages: Sequence[Message]) -> list[str]:
    return [getattr(m.content[0], "text", "?") for m in messages]


class Recorder:
    """A publisher that also reads the store when it hears an event, to show the change
    was already there."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.events: list[Event] = []
        self.stored_at_event: list[int] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.stored_at_event.append(len(await self.store.entries(event.session)))

    @property
    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


class FailingStore(MemoryLogStore):
    """A memory log store whose writes fail while ``broken`` is set."""

    broken = False

    async def append(self, session: str, entries: Sequence[Entry]) -> None:
        if self.broken:
            raise StoreError(f"append to session {session!r} failed: the disk is gone")
        await super().append(session, entries)

    async def create(self, session: str, entries: Sequence[Entry]) -> bool:
        if self.broken:
            raise StoreError(f"create of session {session!r} failed: the disk is gone")
        return await super().create(session, entries)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_new_session_is_created_by_its_first_append_and_announced_after() -> None:
    async def main() -> None:
        store = MemoryLogStore()
        heard = Recorder(store)
        a = await DurableSession.open(store, "ticket-8472", publisher=heard)
        assert heard.events == [] and a.leaf is None and a.model_messages() == []
        [entry] = await a.append(user("Where is order_1234?"))
        assert heard.kinds == ["session_init"] and heard.events[0].detail == {"created": True, "entries": 1}
        assert heard.stored_at_event == [1] and a.leaf == entry.id
        assert await store.entries("ticket-8472") == [entry]
        b = await DurableSession.open(store.replica(), "ticket-8472", publisher=heard)
        assert heard.events[-1].detail == {"created": False, "entries": 1} and b.leaf == entry.id

    run(main())


def test_the_four_audiences() -> None:
    """Messages: model, store, transcript. Meta: model, store. Ephemeral: the model,
    once. Custom: store, transcript."""

    async def main() -> None:
        store = MemoryLogStore()
        a = await DurableSession.open(store, "s")
        seen: list[list[str]] = []

        def model(reads: list[Message]) -> list[Message]:
            seen.append(said(reads))
            return [Message.text("assistant", f"answer {len(seen)}")]

        await a.run(model, user("Rebase this branch."), Meta(Message.text("system", "note")),
                    Ephemeral(user("The build is red since 14:02 UTC.")), Custom("artifact", '{"a": 1}'))
        await a.run(model, user("Again."))
        assert seen == [
            ["Rebase this branch.", "note", "The build is red since 14:02 UTC."],
            ["Rebase this branch.", "note", "answer 1", "Again."],
        ]
        stored = json.dumps([encode_message(e.payload) for e in await store.entries("s")
                             if isinstance(e.payload, Message)])
        assert "build is red" not in stored
        assert [e.kind for e in a.transcript()] == ["message", "custom", "message", "message", "message"]
        with pytest.raises(TypeError, match="never stored"):
            await a.append(Ephemeral(user("x")))  # type: ignore[arg-type]

    run(main())


def test_each_produced_message_is_stored_as_it_ends() -> None:
    async def main() -> None:
        store = MemoryLogStore()
        a = await DurableSession.open(store, "s")
        counts: list[int] = []

        async def model(reads: list[Message]) -> Any:
            for i in range(3):
                counts.append(len(await store.entries("s")))
                yield Message.text("assistant", f"part {i}")

        await a.run(model, user("go"))
        assert counts == [1, 2, 3]

    run(main())


def test_branch_then_resume_in_a_new_handle() -> None:
    """e1-e2-e3-e4, branch to e2, e5: the model reads e1 e2 e5, here and after a
    restart; a branch with nothing after it is resumed at the entry branched to."""

    async def main() -> None:
        store = MemoryLogStore()
        heard = Recorder(store)
        a = await DurableSession.open(store, "s", publisher=heard)
        e = await a.append(user("e1"), user("e2"), user("e3"), user("e4"))
        await a.branch(e[1].id)
        assert a.leaf == e[1].id and heard.kinds[-1] == "branched"
        assert heard.events[-1].detail == {"from": e[3].id} and heard.stored_at_event[-1] == 5
        assert said(a.model_messages()) == ["e1", "e2"]
        again = await DurableSession.open(store.replica(), "s")
        assert again.leaf == e[1].id and said(again.model_messages()) == ["e1", "e2"]
        await a.append(user("e5"))
        assert said(a.model_messages()) == ["e1", "e2", "e5"]
        again = await DurableSession.open(store.replica(), "s")
        assert said(again.model_messages()) == ["e1", "e2", "e5"]
        marker = [x for x in await store.entries("s") if isinstance(x.payload, Custom)]
        assert [m.payload.kind for m in marker] == [BRANCH_KIND] and marker[0].parent_id == e[1].id  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="no entry"):
            await a.branch("nowhere")

    run(main())


def test_fork_copies_the_active_path_into_a_new_id() -> None:
    async def main() -> None:
        store = MemoryLogStore()
        heard = Recorder(store)
        a = await DurableSession.open(store, "s", publisher=heard)
        e = await a.append(user("e1"), user("e2"), user("e3"))
        await a.branch(e[0].id)
        await a.append(user("edit"))
        f = await a.fork("s-what-if")
        assert heard.kinds[-1] == "forked" and heard.events[-1].detail == {"new_session": "s-what-if", "entries": 2}
        assert said(f.model_messages()) == ["e1", "edit"] == said(a.model_messages())
        assert [x.id for x in await store.entries("s-what-if")] == [e[0].id, a.leaf]
        await f.append(user("only in the fork"))
        assert said(a.model_messages()) == ["e1", "edit"]
        with pytest.raises(SessionExists):
            await a.fork("s-what-if")
        assert heard.kinds.count("forked") == 1

    run(main())


def test_compaction_changes_what_the_model_reads_and_removes_nothing() -> None:
    async def main() -> None:
        store = MemoryLogStore()
        heard = Recorder(store)
        a = await DurableSession.open(store, "s", publisher=heard, summary_message=lambda s: user(f"[{s}]"))
        e = await a.append(*(user(f"e{i}") for i in range(1, 7)))
        c = await a.compact("e1-e4 in short", keep_turns=2)
        assert heard.kinds[-1] == "compacted" and heard.events[-1].detail == {"entry": c.id, "first_kept_id": e[4].id}
        assert said(a.model_messages()) == ["[e1-e4 in short]", "e5", "e6"]
        assert [x.id for x in await store.entries("s")] == [*(x.id for x in e), c.id]
        resumed = await DurableSession.open(store, "s", summary_message=lambda s: user(f"[{s}]"))
        assert said(resumed.model_messages()) == ["[e1-e4 in short]", "e5", "e6"]
        await a.branch(e[2].id)
        assert said(a.model_messages()) == ["e1", "e2", "e3"]

    run(main())


@pytest.mark.parametrize("change", ["session_init", "branched", "forked", "compacted"])
def test_no_event_is_published_when_the_store_fails(change: str) -> None:
    async def main() -> None:
        store = FailingStore()
        heard = Recorder(store)
        a = await DurableSession.open(store, "s", publisher=heard)
        if change != "session_init":
            e = await a.append(user("e1"), user("e2"))
        before = list(heard.events)
        store.broken = True
        with pytest.raises(StoreError, match="the disk is gone"):
            if change == "session_init":
                await a.append(user("e1"))
            elif change == "branched":
                await a.branch(e[0].id)
            elif change == "forked":
                await a.fork("other")
            else:
                await a.compact("summary", e[1].id)
        assert heard.events == before
        store.broken = False
        assert await store.entries("other") == []

    run(main())


def test_two_handles_starting_one_session_both_land() -> None:
    """The first append creates the session; a second handle that finds it created
    attaches to its leaf instead, and only the creator announces session_init."""

    async def main() -> None:
        store = MemoryLogStore()
        heard = Recorder(store)
        a = await DurableSession.open(store, "s", publisher=heard)
        b = await DurableSession.open(store.replica(), "s", publisher=heard)
        [first] = await a.append(user("from a"))
        [second] = await b.append(user("from b"))
        assert second.parent_id == first.id
        assert heard.kinds == ["session_init"]
        assert said(b.model_messages()) == ["from a", "from b"]

    run(main())


_PROCESS = textwrap.dedent("""
    import asyncio, json, sys
    from storetest.codec import encode_message
    from storetest.contract import Message
    from reference_stores.durable import DurableSession, Ephemeral, Meta

    def open_store(kind, where):
        if kind == "jsonl":
            from reference_stores.jsonl_log import JsonlLogStore
            return JsonlLogStore(where)
        from reference_stores.sqlite_log import SQLiteLogStore
        return SQLiteLogStore(where)

    async def main(kind, where, step):
        a = await DurableSession.open(open_store(kind, where), "ticket-8472")
        if step == "write":
            reply = lambda reads: [Message.text("assistant", f"read {len(reads)}")]
            e = await a.append(Message.text("user", "e1"), Message.text("user", "e2"))
            await a.run(reply, Message.text("user", "e3"), Ephemeral(Message.text("user", "only once")))
            await a.branch(e[1].id)
            await a.run(reply, Message.text("user", "edited"), Meta(Message.text("system", "a note")))
            await a.compact("before edited", keep_turns=1)
            await a.run(reply, Message.text("user", "after compaction"))
        print(json.dumps([encode_message(m) for m in a.model_messages()]))

    asyncio.run(main(*sys.argv[1:]))
""")


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_new_process_rebuilds_the_same_model_history(tmp_path: Path, kind: str) -> None:
    where = str(tmp_path / ("sessions" if kind == "jsonl" else "logs.db"))

    def process(step: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", _PROCESS, kind, where, step], cwd=ROOT, check=True,
                              capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    written = process("write")
    assert len(written) == 6 and "only once" not in json.dumps(written)
    assert process("read") == written
    store = JsonlLogStore(where) if kind == "jsonl" else SQLiteLogStore(where)
    assert "only once" not in json.dumps([repr(e) for e in store.entries("ticket-8472")])


@pytest.mark.parametrize(
    ("statement", "allowed"),
    [
        ("import reference_stores.durable", set()),
        ("import reference_stores.jsonl_log", set()),
        ("import reference_stores.sqlite_log", {"sqlite3"}),
        ("import reference_stores.postgres_log", {"asyncpg"}),
    ],
)
def test_imports_load_only_what_they_need(statement: str, allowed: set[str]) -> None:
    """The durable handle is standard library only; each log store loads its own driver."""
    from tests.test_boundaries import loaded_after

    assert loaded_after(statement) - allowed == set()


def test_over_postgres_a_new_pool_rebuilds_the_same_model_history(storetest_postgres_url: str) -> None:
    """The handle drives an async store the same way: a second pool (another process's,
    in effect) reads back the same history."""
    asyncpg = pytest.importorskip("asyncpg")
    from reference_stores.postgres_log import SCHEMA, PostgresLogStore

    async def main() -> tuple[list[str], list[str], list[str]]:
        first = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        try:
            async with first.acquire() as conn:
                await conn.execute(SCHEMA)
            heard: list[str] = []
            a = await DurableSession.open(PostgresLogStore(first), "durable-pg",
                                          publisher=lambda e: heard.append(e.kind))
            e = await a.append(user("e1"), user("e2"), user("e3"))
            await a.branch(e[0].id)
            await a.append(user("edit"))
            await a.compact("e1 in short", keep_turns=1)
            written = said(a.model_messages())
        finally:
            await first.close()
        second = await asyncpg.create_pool(storetest_postgres_url, min_size=1, max_size=2)
        try:
            b = await DurableSession.open(PostgresLogStore(second), "durable-pg")
            return written, said(b.model_messages()), heard
        finally:
            await second.close()

    written, read, heard = run(main())
    assert read == written and len(written) == 2
    assert heard == ["session_init", "branched", "compacted"]
