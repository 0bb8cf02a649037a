"""The input-space model (:mod:`storetest._engine.inputs`) for entry logs, item and chat
histories and ADK services: every field at every size of its ladder (to 1 MiB + 1 for a
field without a limit, in characters and in bytes) and every character family, and ids
in every relation of the model (a prefix under each ASCII punctuation, escapes and
normalizations of each other, each Unicode whitespace leading and trailing) kept apart.
The transcripts' own are in :mod:`~storetest.clauses.content` and
:mod:`~storetest.clauses.transcripts`.

Real bugs behind these clauses: a column or a per-field cap at a byte width between the
short values and 1 MiB (``VARCHAR2(4000 BYTE)``, a 512 KiB field limit); entry ids
percent-decoded on their way into a URL or a key; a key scheme that reads a prefix under
a separator other than ``:`` (``history/x`` also reads ``history/x/y``); state keys kept
as dotted paths (``a.b`` nested under ``a``, as MongoDB's update paths do).
"""

from __future__ import annotations

import copy
from typing import Any

from storetest._engine import inputs
from storetest._engine.diagnosis import describe_entry, describe_id_merge, describe_log, shorten
from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Target
from storetest._engine.item_diagnosis import describe_item
from storetest.bindings.adk import event
from storetest.clauses._item_support import NEEDS as ITEM_NEEDS
from storetest.clauses._item_support import expect, protocol, read
from storetest.clauses._log_support import _NEEDS as LOG_NEEDS
from storetest.clauses._log_support import T0, _expect_apart, _expect_log, _msg, _read
from storetest.clauses._registry import clause
from storetest.clauses.adk import NEEDS as ADK_NEEDS
from storetest.clauses.adk import _create, _get, _Place, _refusal, _why_merged, expect_events, stored_form
from storetest.clauses.items import _add, _clear_related, _holds_own, _isolation
from storetest.entries import Entry
from storetest.items import Item, same_value


def _every(protocol_name: str, field: str, nul: bool = True) -> list[str]:
    """A field's values: its size cells up to 64 KiB + 1, then its character families."""
    found = inputs.spec(protocol_name, field)
    return list(dict.fromkeys([*inputs.size_values(found), *(inputs.family_values(nul) if found.families else ())]))


# --- item and chat histories ---------------------------------------------------------------


def _items_one_by_one(t: Target, check: Check, label: str, items: list[Item]) -> None:
    """Add ``items`` as one batch to a new session and compare item by item."""
    session = t.new_session(f"items-sizes-{label}")
    if not _add(check, session, t.store, copy.deepcopy(items), f"add_items() of {len(items)} items ({label})"):
        return
    got = read(check, t, session)
    if isinstance(got, list) and len(got) == len(items):
        for i, (sent, back) in enumerate(zip(items, got, strict=True)):
            if not same_value(sent, back):
                check.add(session, f"{label}, item {i}: {describe_item(sent, back)}", sent, back)
                return
    else:
        expect(check, session, items, got, f"{label}: ", short=True)


@clause(needs=ITEM_NEEDS)
def item_fields_round_trip_at_every_size(t: Target) -> None:
    """A message's content and a tool call's raw arguments come back whole at every size
    of the input model's ladder, 0 to 1 MiB + 1 (2^k - 1, 2^k, 2^k + 1 to 64 KiB + 1, then
    at 1 MiB, in characters and, separately, in UTF-8 bytes with a multibyte character
    last), with every character family and the arguments at every RFC 8259 edge;
    session ids from 31 to 512 bytes keep their items (an id refused cleanly is a
    limit). For a LangChain chat history, the content of a message and the raw
    arguments a provider returned.

    Catches a column or a per-field cap at a byte width the short values never reach
    (``VARCHAR2(4000 BYTE)``, ``TEXT``'s 65,535 bytes, a 512 KiB field limit, which cuts
    the 1 MiB values), a cut that splits a multibyte character, a width counted in
    characters where bytes were meant.
    """
    values = protocol(t)
    name = "item histories"
    content = _every(name, "message content", nul=False)
    arguments = _every(name, "arguments", nul=False) + [s for texts in inputs.JSON_EDGES.values() for s in texts]
    # The large values last: a store that rewrites all its data on each call then
    # rewrites megabytes a few times, not on each small call.
    cases: list[tuple[str, list[Item]]] = [
        ("message content", [{"role": "user", "content": v} for v in content]),
        ("arguments", [values.with_arguments(v) for v in arguments]),
        ("large message content", [{"role": "user", "content": v}
                                   for v in inputs.large_values(inputs.spec(name, "message content"))]),
        ("large arguments", [values.with_arguments(v) for v in inputs.large_values(inputs.spec(name, "arguments"))]),
    ]
    with checking(item_fields_round_trip_at_every_size, t.run) as check:
        for label, items in cases:
            _items_one_by_one(t, check, label, items)
    _isolation(t, inputs.id_values(t.new_session("sz-"), name), item_fields_round_trip_at_every_size)


@clause(needs=ITEM_NEEDS)
def item_related_ids_stay_apart(t: Target) -> None:
    """Session ids in every relation of the input model keep their own items, and
    clearing one side of each relation leaves the other whole: ``x`` beside ``x<c>y``
    for every ASCII punctuation ``c``, ids that are escapes or normalizations of each
    other (``%41`` and ``A``, ``&amp;`` and ``&``, NFC and NFD, NFKC), case variants
    (``Case`` and ``case``), each Unicode whitespace leading and trailing, each
    character family. An id refused cleanly is a limit.

    Catches a key scheme that scans a prefix under a separator other than ``:``
    (``history/x*`` reads and clears ``history/x/y``), an id percent- or HTML-decoded on
    its way, an id stripped of whitespace other than the space, an id normalized or
    lowercased (on every call, or only in the clear).
    """
    prefix = t.new_session("items-rel-")
    ids = inputs.related_ids(prefix)
    refused = _isolation(t, ids, item_related_ids_stay_apart)
    if not protocol(t).clears:  # a history provider has no clear
        return
    apart = {s: i for i, s in enumerate(ids) if s not in refused and _holds_own(t, s, i)}
    with checking(item_related_ids_stay_apart, t.run) as check:
        _clear_related(check, t, inputs.clear_relations(prefix), apart)


# --- entry logs -----------------------------------------------------------------------------


def _append_and_compare(t: Target, check: Check, label: str, entries: list[Entry]) -> None:
    session = t.new_session(f"log-sizes-{label}")
    if check.call(session, f"append of {len(entries)} entries ({label})",
                  t.store.call("append", session, entries)) is RAISED:
        return
    got = _read(check, t, session)
    if isinstance(got, list) and len(got) == len(entries):
        for sent, back in zip(entries, got, strict=True):
            if sent != back:
                check.add(session, f"{label}: " + describe_entry(sent, back), sent, back)
                return
    else:
        _expect_log(check, session, entries, got, f"{label}: ")


@clause(needs=LOG_NEEDS, cost=1)
def log_fields_round_trip_at_every_size(t: Target) -> None:
    """Entry ids, custom kinds, custom JSON data and message text come back whole at
    every size of the input model's ladder (an id or kind from 1 byte to its limit,
    data and text to 1 MiB + 1, in characters and in UTF-8 bytes with a multibyte
    character last), with every character family; custom data at every RFC 8259 edge;
    a batch of 2,000 entries and one more after it; session ids from 31 to 512 bytes.

    Catches a column or a per-field cap at a byte width the short values never reach, a
    cut that splits a multibyte character, entry ids cut to a key length, a log read
    back a page at a time that stops at its first page.
    """
    name = "entry logs"
    cases: list[tuple[str, list[Entry]]] = [
        ("entry ids", [_msg(v, None, text="sized id") for v in _every(name, "entry id")]),
        ("message text", [_msg(f"text-{i}", None, text=v) for i, v in enumerate(_every(name, "message text"))]),
        ("custom kinds", [Entry.custom(f"kind-{i}", None, T0, v, "{}")
                          for i, v in enumerate(_every(name, "custom kind")) if v]),
        ("custom data", [Entry.custom(f"data-{i}", None, T0, "artifact", v) for i, v in enumerate(
            [*inputs.size_values(inputs.spec(name, "custom data")),
             *(s for texts in inputs.JSON_EDGES.values() for s in texts if s)])]),
        # The large values last (see item_fields_round_trip_at_every_size).
        ("large message text", [_msg(f"large-{i}", None, text=v)
                                for i, v in enumerate(inputs.large_values(inputs.spec(name, "message text")))]),
        ("large custom data", [Entry.custom(f"large-data-{i}", None, T0, "artifact", v)
                               for i, v in enumerate(inputs.large_values(inputs.spec(name, "custom data")))]),
    ]
    with checking(log_fields_round_trip_at_every_size, t.run) as check:
        for label, entries in cases:
            _append_and_compare(t, check, label, entries)
        session = t.new_session("log-sizes-2000")
        batch = [_msg(f"n{i}", f"n{i - 1}" if i else None) for i in range(2000)]
        if check.call(session, "append of 2,000 entries", t.store.call("append", session, batch)) is not RAISED \
                and check.call(session, "append of 1 more", t.store.call("append", session, [_msg("last", "n1999")])) \
                is not RAISED:
            _expect_log(check, session, [*batch, _msg("last", "n1999")], _read(check, t, session))
    _log_isolation(t, inputs.id_values(t.new_session("sz-"), name), log_fields_round_trip_at_every_size)


def _log_isolation(t: Target, ids: list[str], clause_fn: Any) -> set[str]:
    """One entry appended to each id, each read back alone; the ids that raised."""
    raised: set[str] = set()
    with checking(clause_fn, t.run) as check:
        for i, session in enumerate(ids):
            try:
                t.run(t.store.call("append", session, [_msg(f"entry-{i}", None, text=f"appended to session #{i}")]))
            except Exception as exc:
                check.add(session, f"append to id {session!r} raised {describe_exception(exc)}")
                raised.add(session)
        _expect_apart(check, t, ids, raised)
    return raised


@clause(needs=LOG_NEEDS)
def log_related_ids_stay_apart(t: Target) -> None:
    """Session ids in every relation of the input model keep their own entries, and
    entry ids in every relation are distinct entries of one session: ``x`` beside
    ``x<c>y`` for every ASCII punctuation ``c``, escapes and normalizations of each
    other (``%41`` and ``A``, ``&amp;`` and ``&``, NFC and NFD), each Unicode whitespace
    leading and trailing, each character family.

    Catches entry ids or session ids percent- or HTML-decoded on their way (``%41`` is
    refused as a second ``A``, or replaces it), normalized or stripped, and a key scheme
    that reads a session's prefix under a separator other than ``:``.
    """
    _log_isolation(t, inputs.related_ids(t.new_session("log-rel-")), log_related_ids_stay_apart)
    with checking(log_related_ids_stay_apart, t.run) as check:
        session = t.new_session("log-rel-entries")
        entries = [_msg(v, None, text=f"entry #{i}") for i, v in enumerate(inputs.related_ids("e-"))]
        try:
            t.run(t.store.call("append", session, entries))
        except ValueError as exc:
            check.add(session, f"a batch of {len(entries)} distinct entry ids was refused ({describe_exception(exc)}): "
                      "two of them are one id to the store, decoded, normalized or stripped on their way")
            return
        except Exception as exc:
            check.add(session, f"append() raised {describe_exception(exc)}")
            return
        got = _read(check, t, session)
        if got is not RAISED and got != entries:
            ids = [e.id for e in got if isinstance(e, Entry)] if isinstance(got, list) else []
            lost = [e.id for e in entries if e.id not in ids]
            check.add(session, (f"entry ids {shorten(lost, 120)} came back as others: decoded, normalized or "
                                "stripped on their way" if lost else "") or describe_log(entries, got),
                      [e.id for e in entries], ids)


# --- ADK services ---------------------------------------------------------------------------


@clause(needs=ADK_NEEDS)
def adk_fields_round_trip_at_every_size(t: Target) -> None:
    """Event text, state keys and state values come back whole at every size of the
    input model's ladder, 0 to 1 MiB + 1 (to 64 KiB + 1, then at 1 MiB, in characters
    and in UTF-8 bytes with a multibyte character last), with every character family:
    the texts as the parts of one event, the keys and values as the state of one create
    and the delta of one event; session ids from 31 to 512 bytes keep their sessions (an
    id refused cleanly is a limit).

    Catches a column or a per-field cap at a byte width the short values never reach,
    a state key cut to a key length, a cut that splits a multibyte character.
    """
    name = "adk"
    texts = _every(name, "event text", nul=False)
    keys = _every(name, "state key", nul=False)
    values = _every(name, "state value", nul=False)
    large = {f: inputs.large_values(inputs.spec(name, f)) for f in ("event text", "state key", "state value")}
    with checking(adk_fields_round_trip_at_every_size, t.run) as check:
        for label, ev in (("texts", event("user", texts=tuple(texts))),
                          ("large texts", event("user", texts=tuple(large["event text"]))),
                          ("state keys", event("agent", state_delta={k: i for i, k in enumerate(keys)})),
                          ("state values", event("agent", state_delta={f"v{i}": v for i, v in enumerate(values)}))):
            _one_event(t, check, label, ev)
        for label, state in (("large state keys", {k: i for i, k in enumerate(large["state key"])}),
                             ("large state values", {f"v{i}": v for i, v in enumerate(large["state value"])}),
                             ("state keys", {k: i for i, k in enumerate(keys)})):
            p = _Place(t.new_session("app-sizes"), t.new_session("user"), t.new_session(label.replace(" ", "-")))
            if _create(check, t.store, p, copy.deepcopy(state)) is RAISED:
                continue
            got = _get(check, t.store, p)
            if got not in (None, RAISED) and not same_value(state, dict(got.state)):
                check.add(str(p), f"{label}: the state read back differs: {describe_item(state, dict(got.state))}",
                          shorten(state), shorten(dict(got.state)))
    _adk_isolation(t, inputs.id_values(t.new_session("sz-"), name), adk_fields_round_trip_at_every_size)


def _one_event(t: Target, check: Check, label: str, ev: Any) -> None:
    p = _Place(t.new_session("app-sizes"), t.new_session("user"), t.new_session(label.replace(" ", "-")))
    session = _create(check, t.store, p)
    if session is RAISED:
        return
    form = stored_form(ev)
    if check.call(str(p), f"append_event() of {label}", t.store.call("append_event", session, ev)) is RAISED:
        return
    got = _get(check, t.store, p)
    if expect_events(check, p, [form], got, f"{label}: ") and ev.actions.state_delta:
        state = dict(ev.actions.state_delta)
        if not same_value(state, dict(got.state)):
            check.add(str(p), f"{label}: the state read back differs from the delta applied: "
                      + describe_item(state, dict(got.state)), shorten(state), shorten(dict(got.state)))


def _adk_isolation(t: Target, sids: list[str], clause_fn: Any) -> None:
    """Sessions with ids ``sids`` under one app and user: each keeps its own state and event."""
    app, user = t.new_session("app-rel"), t.new_session("user-rel")
    places = [_Place(app, user, s) for s in sids]
    refused: dict[str, list[str]] = {}
    with checking(clause_fn, t.run) as check:
        made: list[tuple[_Place, int, list[dict[str, Any]]]] = []
        for i, p in enumerate(places):
            try:
                session = t.run(t.store.call("create_session", p.app, p.user, {"owner": i}, p.sid))
            except Exception as exc:
                if "exist" in str(exc).lower():
                    check.add(str(p), f"create_session() of {p.sid!r} raised {describe_exception(exc)}, though no "
                              "session had that id: ids are merged " + _why_merged(p, places[:i]))
                else:
                    _refusal(t, check, p, exc, refused)
                continue
            ev = event("user", texts=(f"owned by #{i}",))
            if check.call(str(p), "append_event()", t.store.call("append_event", session, ev)) is not RAISED:
                made.append((p, i, [stored_form(ev)]))
        for p, i, want in made:
            got = _get(check, t.store, p)
            if got in (None, RAISED):
                if got is None:
                    check.add(str(p), "get_session() returned None for a session that was created")
                continue
            if got.state.get("owner") != i:
                owner = got.state.get("owner")
                other = places[owner].sid if isinstance(owner, int) and 0 <= owner < len(places) else owner
                check.add(str(p), f"session #{i} holds session #{owner}'s state: two ids are one session: "
                          + describe_id_merge(p.sid, str(other)), i, owner)
                continue
            expect_events(check, p, want, got, f"session #{i}: ")
        for reason, which in refused.items():
            t.limits.append(f"{len(which)} id(s) refused ({reason}): " + ", ".join(
                shorten(s, 40) for s in which[:6]) + (" ..." if len(which) > 6 else ""))


@clause(needs=ADK_NEEDS)
def adk_related_ids_stay_apart(t: Target) -> None:
    """State keys in every relation of the input model are distinct keys, in a
    session's initial state and in an event's delta, and session ids in every relation
    are distinct sessions of one user: ``x`` beside ``x<c>y`` for every ASCII
    punctuation ``c``, escapes and normalizations of each other, each Unicode whitespace
    leading and trailing, each character family (an id refused cleanly is a limit).

    Catches state kept as dotted paths (``a.b`` nested under ``a``, or refused beside
    it), keys flattened into one string without escaping the separator, keys or ids
    decoded, normalized or stripped on their way.
    """
    keys = [k for k in inputs.related_ids("k-") if "\x00" not in k]
    state = {k: f"value of key #{i}" for i, k in enumerate(keys)}
    with checking(adk_related_ids_stay_apart, t.run) as check:
        p = _Place(t.new_session("app-keys"), t.new_session("user"), t.new_session("keys"))
        if _create(check, t.store, p, copy.deepcopy(state)) is not RAISED:
            got = _get(check, t.store, p)
            if got not in (None, RAISED) and not same_value(state, dict(got.state)):
                check.add(str(p), "state keys in the initial state merged or changed: "
                          + _key_diff(state, dict(got.state)), len(state), len(got.state))
        _one_event(t, check, "related state keys", event("agent", state_delta=copy.deepcopy(state)))
    _adk_isolation(t, inputs.related_ids(t.new_session("adk-rel-")), adk_related_ids_stay_apart)


def _key_diff(sent: dict[str, Any], got: dict[str, Any]) -> str:
    lost = [k for k in sent if k not in got]
    extra = [k for k in got if k not in sent]
    if lost or extra:
        return (f"{len(lost)} key(s) lost ({shorten(lost[:4], 100)}), {len(extra)} unknown "
                f"({shorten(extra[:4], 100)}): the store keys state by a form of the key that two keys share "
                "(dotted paths, a joined string, a decoded or normalized key)")
    return describe_item(sent, got)


__all__: list[str] = []
