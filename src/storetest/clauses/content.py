"""What goes in comes out: every field, byte for byte, at any size; and what must not
go in is refused.

Real bugs behind these clauses: Postgres ``jsonb`` and MySQL ``JSON`` rewriting a
model's raw tool-call JSON; 3-byte ``utf8`` charsets mangling emoji; ``TEXT`` columns
silently truncating at 64 KiB; attachments decoded as text; ``123`` coerced to ``"123"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import note

from storetest._engine import inputs, strategies
from storetest._engine.diagnosis import describe_text, describe_transcript, is_reordered
from storetest._engine.failures import RAISED, Check, checking
from storetest._engine.harness import Target
from storetest.clauses._registry import clause
from storetest.clauses._support import examples, texts
from storetest.contract import MAX_SESSION_ID_BYTES, Attachment, Message, Text, ToolCall, ToolResult


def _round_trip_each(t: Target, check: Check, session: str, corpus: list[Message]) -> None:
    """Save ``corpus`` and compare message by message, so each damaged one is named."""
    if check.call(session, f"save({session!r}, {len(corpus)} messages)", t.store.save(session, corpus)) is RAISED:
        # One bad message may be what the store refuses: try each on its own.
        for i, message in enumerate(corpus):
            one = f"{session}/{i}"
            if check.call(one, f"save of message #{i}", t.store.save(one, [message])) is not RAISED:
                check.transcript(one, [message], check.call(one, "messages()", t.store.messages(one)))
        return
    got = check.call(session, "messages()", t.store.messages(session))
    # Message by message only when nothing moved: a reorder compared by position would
    # read as every moved message "changed".
    if isinstance(got, list) and len(got) == len(corpus) and not is_reordered(corpus, got):
        for i, (sent_message, got_message) in enumerate(zip(corpus, got, strict=True)):
            if sent_message != got_message:
                check.add(session, describe_transcript([sent_message], [got_message], first=i),
                          sent_message, got_message)
    else:
        check.transcript(session, corpus, got)


@clause(cost=1)
def transcript_round_trips_exactly(t: Target) -> None:
    """A saved transcript comes back equal, field by field and byte for byte.

    Every short field runs to its limit (``MAX_ID_BYTES``, ``MAX_NAME_BYTES``), media
    types come in mixed case and with spaces, and ids repeat where the contract allows
    (two tool calls with one id in a message). Catches text normalized to NFC, trailing
    whitespace stripped, CRLF turned into LF, NUL dropped, emoji mangled by a 3-byte
    charset, attachment bytes decoded as text, a ``VARCHAR(64)`` tool name or id,
    lower-cased media types, tool calls kept in a dict by id, identical messages stored once.
    """
    # Every known-troublesome text in every place text goes, before anything random,
    # so a normalizing store is caught on every run, not on a lucky draw.
    corpus = [
        Message("user", (Text(text), ToolResult(f"call_{i}", text), ToolCall(text, text, "{}")))
        for i, text in enumerate(strategies.NASTY_TEXTS)
    ] + [Message("user", (a,)) for a in strategies.NASTY_ATTACHMENTS] + list(strategies.LIMIT_MESSAGES)
    # Every character family of the input model (storetest._engine.inputs) in every text field.
    corpus += [
        Message("assistant", (Text(piece), ToolCall(piece, piece, "{}"), ToolResult(piece, piece),
                              Attachment(piece, piece.encode("utf-8"))))
        for piece in inputs.family_values()
    ]
    # Twins, apart and side by side: a transcript keeps a message said twice, twice.
    corpus += [Message.text("user", "twin"), Message.text("assistant", "between"), Message.text("user", "twin"),
               Message.text("user", "twin")]
    with checking(transcript_round_trips_exactly, t.run) as check:
        _round_trip_each(t, check, t.new_session("roundtrip"), corpus)

    @examples(t, strategies.transcripts)
    def example(transcript: list[Message]) -> None:
        session = t.new_session("roundtrip")
        note(f"session {session!r}")
        with checking(transcript_round_trips_exactly, t.run) as check:
            if check.call(session, "save()", t.store.save(session, transcript)) is not RAISED:
                check.transcript(session, transcript, check.call(session, "messages()", t.store.messages(session)))

    example()


@clause()
def tool_arguments_are_kept_verbatim(t: Target) -> None:
    """Tool-call arguments come back byte for byte, valid JSON or not: a store never parses them.

    Every RFC 8259 production is asked at its edges (the input model's ``JSON_EDGES``:
    bare values, 512-deep nesting, 4 KiB and duplicate keys, int64 and float64 edges),
    and every character family of the input model as raw, non-JSON text.
    Catches the Postgres ``jsonb`` / MySQL ``JSON`` column (keys sorted, duplicate keys
    dropped, whitespace and numbers rewritten, escapes decoded), and a store that
    refuses or "repairs" the truncated JSON of a reply that was cut off.
    """
    edges = [text for texts in inputs.JSON_EDGES.values() for text in texts]
    corpus = [
        Message("assistant", (ToolCall(f"call_{i}", "lookup", args),))
        for i, args in enumerate([*strategies.NASTY_ARGUMENTS, *edges, *inputs.family_values()])
    ]
    with checking(tool_arguments_are_kept_verbatim, t.run) as check:
        _round_trip_each(t, check, t.new_session("arguments"), corpus)

    @examples(t, strategies.tool_arguments)
    def example(arguments: str) -> None:
        session = t.new_session("arguments")
        note(f"session {session!r}")
        sent = [Message("assistant", (ToolCall("call_1", "lookup", arguments),))]
        with checking(tool_arguments_are_kept_verbatim, t.run) as check:
            if check.call(session, "save()", t.store.save(session, sent)) is not RAISED:
                check.transcript(session, sent, check.call(session, "messages()", t.store.messages(session)))

    example()


@clause()
def large_values_round_trip(t: Target) -> None:
    """A 256 KiB tool argument and a 2,000-message transcript come back whole (the
    size ladder to 1 MiB + 1 of every field is ``every_field_round_trips_at_every_size``'s);
    in the ``ci`` profile, message text at 16 MiB - 1, 16 MiB and 16 MiB + 1, in
    characters and in bytes, too. A backend that cannot hold 16 MiB may refuse it: an
    exception that stores nothing is a *limit* the report lists; a value cut or changed
    is a failure.

    Catches ``TEXT``/``VARCHAR``/``BLOB`` limits, packet limits, MySQL's ``MEDIUMTEXT``
    (16 MiB - 1, silently truncated outside strict mode), and per-row sizes that only
    fail at scale.
    """
    big_args = '{"blob": "' + "x " * (2**17) + '", "z": 1, "a": 2}'
    transcript_2000 = texts(2000, "long")
    cases = [
        ("args", [Message("assistant", (ToolCall("call_big", "upload", big_args),))]),
        ("2000", transcript_2000),
        ("2001", [*transcript_2000, Message.text("user", "one more")]),
        ("1000", transcript_2000[:1000]),
    ]
    with checking(large_values_round_trip, t.run) as check:
        session = t.new_session("large")
        for label, transcript in cases:
            if not label.isdigit():
                session = t.new_session(f"large-{label}")
            what = f"save of {len(transcript)} messages ({label})"
            if check.call(session, what, t.store.save(session, transcript)) is RAISED:
                continue
            got = check.call(session, "messages()", t.store.messages(session))
            if got is not RAISED and got != transcript:
                check.add(session, describe_transcript(transcript, got) if isinstance(got, list)
                          else "messages() did not return a list", f"{len(transcript)} messages",
                          f"{len(got)} messages" if isinstance(got, list) else got)
        if t.profile.name in inputs.HUGE_PROFILES:
            for text in inputs.huge_values():
                _huge(t, check, text)


def _huge(t: Target, check: Check, text: str) -> None:
    """One 16 MiB message: refused cleanly (a limit), or back whole."""
    session = t.new_session("huge")
    sent = [Message.text("user", text)]
    size = f"{len(text):,} characters, {len(text.encode()):,} bytes"
    try:
        t.run(t.store.save(session, sent))
    except Exception as exc:
        got = check.call(session, f"messages() after a refused save of {size}", t.store.messages(session))
        if got is not RAISED and got != []:
            check.add(session, f"a save of {size} raised {type(exc).__name__} and still stored something")
        elif got is not RAISED:
            t.limits.append(f"message text of {size} refused ({type(exc).__name__})")
        return
    got = check.call(session, "messages()", t.store.messages(session))
    if got is not RAISED and got != sent:
        check.add(session, f"message text of {size}: " + (
            describe_text(text, got[0].content[0].text) if isinstance(got, list) and len(got) == 1
            and got[0].content and isinstance(got[0].content[0], Text) else describe_transcript(sent, got)),
            f"{len(text):,} characters", None)


def _field_corpora(large_ones: bool) -> Iterator[tuple[str, list[Message]]]:
    """Each transcript field at each of its size cells (storetest._engine.inputs): the
    cheap ones, or (``large_ones``) those past 64 KiB + 1, made one field at a time so a
    check holds one field's large values at once."""
    specs = {spec.name: spec for spec in inputs.FIELDS if spec.protocol == "transcripts"}

    def sized(name: str) -> list[str]:
        return inputs.size_values(specs[name])

    def large(name: str) -> list[str]:
        return inputs.large_values(specs[name])

    if large_ones:
        yield "large message text", [Message.text("user", v) for v in large("message text")]
        yield "large arguments", [Message("assistant", (ToolCall(f"call_{i}", "lookup", v),))
                                  for i, v in enumerate(large("arguments"))]
        yield "large tool result", [Message("tool", (ToolResult(f"call_{i}", v),))
                                    for i, v in enumerate(large("tool result"))]
        yield "large attachment data", [Message("user", (Attachment("application/octet-stream", v),))
                                        for v in inputs.large_bytes(specs["attachment data"])]
        return
    data = bytes(range(256)) * (inputs.CHEAP_LIMIT // 256 + 1)
    yield "message text", [Message.text("user", v) for v in sized("message text")]
    yield "tool name", [Message("assistant", (ToolCall(f"call_{i}", v, "{}"),))
                        for i, v in enumerate(sized("tool name"))]
    yield "call id", ([Message("assistant", (ToolCall(v, "lookup", "{}"),)) for v in sized("call id")]
                      + [Message("tool", (ToolResult(v, "result"),)) for v in sized("call id")])
    yield "arguments", [Message("assistant", (ToolCall(f"call_{i}", "lookup", v),))
                        for i, v in enumerate(sized("arguments"))]
    yield "tool result", [Message("tool", (ToolResult(f"call_{i}", v),)) for i, v in enumerate(sized("tool result"))]
    yield "media type", [Message("user", (Attachment(v, b"\x00\xff"),)) for v in sized("media type")]
    yield "attachment data", [Message("user", (Attachment("application/octet-stream", data[: len(v.encode())]),))
                              for v in sized("attachment data")]


@clause(cost=1)
def every_field_round_trips_at_every_size(t: Target) -> None:
    """Every field comes back whole at every size of the input model's ladder: 0, 1 and
    2^k - 1, 2^k, 2^k + 1 up to 64 KiB + 1 and the field's limit (to 1 MiB + 1 for fields
    without one: past 64 KiB + 1, at 1 MiB only, where a known limit sits), counted in
    characters and, separately, in UTF-8 bytes with a multibyte character last; steers
    too (the short ones queued behind one take, each large one behind its own), and
    session ids at each size from 31 bytes to the 512-byte limit.

    Catches a column that cuts at a width between the short values and 1 MiB: Oracle's
    ``VARCHAR2(4000 BYTE)`` chosen for text of up to 4,000 characters, MySQL's
    ``VARCHAR(255)`` tool name (255 characters, though the limit is 256 bytes),
    ``TEXT``'s 65,535 bytes, a cut that splits a multibyte character.
    """
    # Steers first, the large transcripts last: a store that rewrites all its data on
    # every call (one JSON file) then rewrites tens of megabytes a few times, not on
    # every small call.
    steer = inputs.spec("transcripts", "steer text")
    with checking(every_field_round_trips_at_every_size, t.run) as check:
        # The short ones behind one take (over 1 MiB in all), each large one behind its own.
        queues = [inputs.size_values(steer), *([v] for v in inputs.large_values(steer))] if t.has("steers") else []
        for queue in queues:
            session = t.new_session("sizes-steers")
            added = [text for text in queue
                     if check.call(session, f"add_steer({len(text.encode())} bytes)",
                                   t.store.add_steer(session, text)) is not RAISED]
            check.steers(session, added, check.call(session, "take_steers()", t.store.take_steers(session)))
        for field, corpus in _field_corpora(large_ones=False):
            if corpus:
                _round_trip_each(t, check, t.new_session("sizes-" + field.replace(" ", "-")), corpus)
        prefix = t.new_session("size-id-")
        for session in inputs.id_values(prefix):
            sent = [Message.text("user", f"saved to an id of {len(session.encode())} bytes")]
            if check.call(session, "save()", t.store.save(session, sent)) is not RAISED:
                check.transcript(session, sent, check.call(session, "messages()", t.store.messages(session)))
        for field, corpus in _field_corpora(large_ones=True):
            _round_trip_each(t, check, t.new_session("sizes-" + field.replace(" ", "-")), corpus)


@clause()
def bad_input_is_rejected(t: Target) -> None:
    """A non-string or empty session id, a non-message, or non-string steer text raises
    ``TypeError``/``ValueError`` naming the argument, and changes nothing stored.

    Catches stores that coerce ``123`` to ``"123"``, save the good half of a bad list,
    or fail deep in the driver with an error that names nothing.
    """
    session = t.new_session("bad-input")
    good = texts(2, "good")
    store = t.store
    bad_calls: list[tuple[str, str, Callable[[], Any]]] = [
        ("save(123, ...)", "session", lambda: store.save(123, good)),
        ("save(None, ...)", "session", lambda: store.save(None, good)),
        ("save(b'id', ...)", "session", lambda: store.save(session.encode(), good)),
        ("save('', ...)", "session", lambda: store.save("", good)),
        ("save(id longer than the limit, ...)", "session",
         lambda: store.save("x" * (MAX_SESSION_ID_BYTES + 1), good)),
        ("save(session, [message, 'not a message'])", "messages",
         lambda: store.save(session, [good[0], "not a message"])),
        ("save(session, [message, {'role': 'user'}])", "messages",
         lambda: store.save(session, [good[0], {"role": "user", "content": []}])),
        ("save(session, None)", "messages", lambda: store.save(session, None)),
        ("save(session, 'text')", "messages", lambda: store.save(session, "some text")),
        ("messages(42)", "session", lambda: store.messages(42)),
    ]
    if t.has("steers"):
        bad_calls += [
            ("add_steer(session, 5)", "text", lambda: store.add_steer(session, 5)),
            ("add_steer(session, b'bytes')", "text", lambda: store.add_steer(session, b"bytes")),
            ("add_steer(None, 'text')", "session", lambda: store.add_steer(None, "text")),
            ("take_steers(['a'])", "session", lambda: store.take_steers(["a"])),
        ]
    with checking(bad_input_is_rejected, t.run) as check:
        check.call(session, "save()", store.save(session, good))
        if t.has("steers"):
            check.call(session, "add_steer()", store.add_steer(session, "kept"))
        for call, argument, make in bad_calls:
            try:
                t.run(make())
            except (TypeError, ValueError) as exc:
                if argument not in str(exc):
                    check.add(session, f"{call} raised {type(exc).__name__} that does not name the "
                              f"argument {argument!r}: {exc}")
            except Exception as exc:
                check.add(session, f"{call} raised {type(exc).__name__} ({exc}); expected "
                          f"TypeError or ValueError naming {argument!r}")
            else:
                check.add(session, f"{call} was accepted; expected TypeError or ValueError "
                          f"naming {argument!r}")
        check.transcript(session, good, check.call(session, "messages()", store.messages(session)), good)
        if t.has("steers"):
            check.steers(session, ["kept"], check.call(session, "take_steers()", store.take_steers(session)))
