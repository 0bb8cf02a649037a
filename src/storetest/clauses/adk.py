"""Google ADK session services (:mod:`storetest.bindings.adk`): a session keyed by (app,
user, id) is created once, its events come back in append order and verbatim (ADK's own
``model_dump``, type for type, timestamps exactly), state deltas land in their scope
(``app:`` for the app, ``user:`` for the user's sessions, the rest for the session;
``temp:`` never stored), ``list_sessions`` and ``delete_session`` touch exactly the
user's sessions, replicas and fresh databases work, and an append on a stale session
loses and duplicates nothing.

Real bugs behind these clauses: ``DatabaseSessionService`` on Postgres refusing a NUL in
event text and session ids over 128 characters (``VARCHAR(128)``) that SQLite keeps;
replicas starting together on a fresh database failing their first calls (tables
created on first use); a create that checks for the id, then inserts (two callers both
"win"); ``InMemorySessionService`` stripping spaces from ids.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from storetest._engine import inputs, races
from storetest._engine.backends import fresh_fixtures, open_handles
from storetest._engine.diagnosis import shorten
from storetest._engine.failures import RAISED, Check, checking, describe_exception
from storetest._engine.harness import Handle, Target
from storetest._engine.item_diagnosis import describe_item
from storetest.bindings.adk import dump, event
from storetest.clauses._registry import clause
from storetest.clauses.transcripts import confusable_ids
from storetest.items import first_difference, same_value

NEEDS = ("adk",)
TEMP = "temp:"


class _Place:
    """One session's coordinates, and the label a violation names it by."""

    def __init__(self, app: str, user: str, sid: str) -> None:
        self.app, self.user, self.sid = app, user, sid

    def __str__(self) -> str:
        return f"{self.app}/{self.user}/{self.sid}"


def _place(t: Target, label: str) -> _Place:
    return _Place(t.new_session(f"app-{label}"), t.new_session("user"), t.new_session(label))


def _create(check: Check, h: Handle, p: _Place, state: dict[str, Any] | None = None) -> Any:
    return check.call(str(p), f"create_session() through the {h.label}",
                      h.call("create_session", p.app, p.user, state, p.sid))


def _get(check: Check, h: Handle, p: _Place) -> Any:
    return check.call(str(p), f"get_session() through the {h.label}", h.call("get_session", p.app, p.user, p.sid))


def _append(check: Check, h: Handle, p: _Place, session: Any, ev: Any) -> bool:
    return check.call(str(p), f"append_event() through the {h.label}", h.call("append_event", session, ev)) \
        is not RAISED


def stored_form(ev: Any) -> dict[str, Any]:
    """What a service must give back for ``ev``: its ``model_dump`` with the ``temp:``
    keys of its state delta removed (ADK's base class trims them before storing)."""
    out: dict[str, Any] = copy.deepcopy(dump(ev))
    actions = out.get("actions") or {}
    if isinstance(actions.get("state_delta"), dict):
        actions["state_delta"] = {k: v for k, v in actions["state_delta"].items() if not k.startswith(TEMP)}
    return out


def _events_of(check: Check, p: _Place, session: Any, what: str) -> list[dict[str, Any]] | None:
    if session is RAISED:
        return None
    if session is None:
        check.add(str(p), f"{what}: get_session() returned None for a session that was created")
        return None
    return [dump(e) for e in session.events]


def expect_events(check: Check, p: _Place, want: list[dict[str, Any]], session: Any, what: str = "") -> bool:
    """Record a violation unless ``session`` holds exactly the events ``want`` (dumps), in order."""
    got = _events_of(check, p, session, what.rstrip(": ") or "after the appends")
    if got is None:
        return False
    ids = [e.get("id") for e in got]
    sent_ids = [e["id"] for e in want]
    if ids != sent_ids:
        if sorted(map(str, ids)) == sorted(map(str, sent_ids)):
            check.add(str(p), f"{what}events came back in a different order than appended", sent_ids, ids)
        else:
            lost = [i for i in sent_ids if i not in ids]
            extra = [i for i in ids if i not in sent_ids or ids.count(i) > sent_ids.count(i)]
            check.add(str(p), f"{what}{len(lost)} event(s) lost, {len(extra)} unexpected or duplicated "
                      f"[lost={len(lost)} unexpected={len(extra)}]", sent_ids, ids)
        return False
    for i, (a, b) in enumerate(zip(want, got, strict=True)):
        if not same_value(a, b):
            check.add(str(p), f"{what}event {i} ({a['id']}) changed: {describe_item(a, b)}", a, b)
            return False
    return True


# --- what goes in comes out ------------------------------------------------------------

_ARGS: list[dict[str, Any]] = [
    {"q": "weather in Zürich", "n": 3, "f": 1.0, "neg": -0.5, "big": 2**53 + 1, "t": True, "none": None},
    {"nested": {"list": [1, 1.0, True, "1", None, [], {}], "deep": {"a": {"b": {"c": ["d"]}}}}},
    {"text": "emoji 👍🏽 and RTL שלום and e\u0301 vs é", "quotes": "\"'\\", "newlines": "a\r\nb\n"},
    {"empty": "", "spaces": "  ", "z": 1, "a": 2},
]


def corpus(label: str) -> list[Any]:
    """Events of every shape the clauses send: text, function calls and responses,
    several parts, no content, state deltas of every scope, ADK's own timestamps and ids."""
    texts = ["plain text", "unicode: 日本語 👍🏽 e\u0301 ß", "  leading and trailing  ", "line\r\nbreaks\n\t",
             "x" * 20_000, ""]
    out = [event("user", texts=(t,), invocation_id=f"{label}-inv{i}") for i, t in enumerate(texts)]
    out += [event("agent", calls=((f"call-{i}", "lookup", args),), invocation_id=f"{label}-call")
            for i, args in enumerate(_ARGS)]
    out += [event("agent", responses=((f"call-{i}", "lookup", {"result": args}),)) for i, args in enumerate(_ARGS)]
    out.append(event("agent", texts=("thinking", "more"), calls=(("c1", "a", {}), ("c2", "b", {"k": [1]})),
                     responses=(("c0", "z", {"ok": 1.5}),)))
    out.append(event("agent", state_delta={"plain": 1, "app:shared": [1.0, "x"], "user:pref": {"dark": True},
                                           "temp:scratch": "never stored"}))
    out.append(event("agent"))  # no content, an empty delta
    return out


@clause(needs=NEEDS)
def adk_events_round_trip_exactly(t: Target) -> None:
    """Every event appended comes back from ``get_session`` exactly as appended, compared
    as ADK's own ``model_dump`` type for type: text parts (unicode, 20,000 characters,
    empty), function calls whose ``args`` mix ``1``, ``1.0``, ``True`` and ``None``,
    integers past 2^53, function responses, several parts, no content, its id and
    ADK's own ``time.time()`` timestamp to the last bit (``temp:`` keys aside).

    Catches events through a JSON column that turns ``1.0`` into ``1``, a timestamp
    through a ``DATETIME`` (microseconds) or a ``REAL`` (rounded), fields left out of a
    column-per-field schema (ADK's legacy schema warns that it drops some).
    """
    with checking(adk_events_round_trip_exactly, t.run) as check:
        p = _place(t, "adk-rt")
        session = _create(check, t.store, p)
        if session is RAISED:
            return
        want: list[dict[str, Any]] = []
        for ev in corpus("rt"):
            form = stored_form(ev)
            if _append(check, t.store, p, session, ev):
                want.append(form)
        expect_events(check, p, want, _get(check, t.store, p))


@clause(needs=NEEDS)
def adk_events_keep_nul_characters(t: Target) -> None:
    """A NUL character (``\\x00``, valid in JSON and in a Python string) comes back where it
    was: in a text part, in a function call's argument, in a state value and key. Each case has
    its own session, and the other clauses send no NUL, so a backend refusing NUL fails
    here only.

    Catches ``DatabaseSessionService`` on Postgres (``jsonb``: "unsupported Unicode escape
    sequence"), a C-string boundary that cuts at the NUL.
    """
    cases = [("text", event("user", texts=("before\x00after",))),
             ("argument", event("agent", calls=(("c", "f", {"q": "a\x00b"}),))),
             ("state value", event("agent", state_delta={"k": "v\x00w"})),
             ("state key", event("agent", state_delta={"k\x00l": "v"}))]
    with checking(adk_events_keep_nul_characters, t.run) as check:
        for what, ev in cases:
            p = _place(t, "adk-nul")
            session = _create(check, t.store, p)
            if session is RAISED:
                continue
            form = stored_form(ev)
            if check.call(str(p), f"append_event() of an event with a NUL in a {what}",
                              t.store.call("append_event", session, ev)) is not RAISED:
                expect_events(check, p, [form], _get(check, t.store, p), f"a NUL in a {what}: ")


@clause(needs=NEEDS)
def adk_events_keep_append_order(t: Target) -> None:
    """Events come back in the order appended: across several appends and reads, when
    events share one timestamp (a coarse clock, one tick), and when a later event's
    timestamp is earlier (two replicas whose clocks differ by milliseconds).

    Catches a read ordered by timestamp with ties broken by a random id (the order of
    events of one tick is lost), ordered by timestamp alone (a replica's skewed clock
    puts a function's response before its call), ordered by nothing.
    """
    tick = 1_800_000_000.125
    cases = {
        "one timestamp": [event("agent", texts=(f"tied {i}",), timestamp=tick) for i in range(8)],
        # Two replicas alternating, the second one's clock 5 ms behind the first's.
        "a clock 5 ms behind": [event("agent", texts=(f"skewed {i}",), timestamp=tick + i * 0.001 - 0.005 * (i % 2))
                                for i in range(6)],
        "ADK's own timestamps": [event("agent", texts=(f"own {i}",)) for i in range(12)],
    }
    with checking(adk_events_keep_append_order, t.run) as check:
        for what, events in cases.items():
            p = _place(t, "adk-order")
            session = _create(check, t.store, p)
            if session is RAISED:
                continue
            want: list[dict[str, Any]] = []
            for n, ev in enumerate(events):
                want.append(stored_form(ev))
                if not _append(check, t.store, p, session, ev):
                    break
                if n % 4 == 3 and not expect_events(check, p, want, _get(check, t.store, p), f"{what}: "):
                    break
            else:
                expect_events(check, p, want, _get(check, t.store, p), f"{what}: ")


#: Events the options clause appends, one second apart from this timestamp.
OPTION_EVENTS = 4
_OPTION_TICK = 1_800_000_000.0


def get_session_options(n: int, tick: float) -> list[tuple[str, dict[str, Any], slice]]:
    """Every ``GetSessionConfig`` option at its edges, for ``n`` events stamped ``tick``,
    ``tick + 1``...: the option's name, its value, and the slice of the events it keeps
    (``after_timestamp`` keeps events at or after it, as ADK's services do)."""
    recent = [(f"num_recent_events={k}", {"num_recent_events": k}, slice(n - min(k, n), n))
              for k in (0, 1, n, n + 1)]
    after = [("after_timestamp before the first event", {"after_timestamp": tick - 1}, slice(0, n)),
             ("after_timestamp at event 2's timestamp", {"after_timestamp": tick + 2}, slice(2, n)),
             ("after_timestamp between events 2 and 3", {"after_timestamp": tick + 2.5}, slice(3, n)),
             ("after_timestamp after the last event", {"after_timestamp": tick + n}, slice(n, n)),
             ("num_recent_events=2 and after_timestamp at event 1's",
              {"num_recent_events": 2, "after_timestamp": tick + 1}, slice(n - 2, n))]
    return recent + after


@clause(needs=NEEDS)
def adk_get_session_options_select_events(t: Target) -> None:
    """``get_session`` with a ``GetSessionConfig`` gives the events it selects and the
    whole state: ``num_recent_events=k`` the last ``k`` events (none for 0, every one
    for the count or more), ``after_timestamp`` the events at or after it (every one
    before the first, none after the last); both together, the events both keep.

    Catches a service that ignores the config (every event for ``num_recent_events=0``),
    ``if config.num_recent_events:`` (0 read as no limit), ``ORDER BY timestamp LIMIT k``
    without ``DESC`` (the first ``k`` events), ``timestamp > after`` where ``>=`` was meant.
    """
    events = [event("agent", texts=(f"option {i}",), timestamp=_OPTION_TICK + i) for i in range(OPTION_EVENTS)]
    with checking(adk_get_session_options_select_events, t.run) as check:
        p = _place(t, "adk-options")
        session = _create(check, t.store, p, {"kept": 1})
        if session is RAISED:
            return
        for ev in events:
            if not _append(check, t.store, p, session, ev):
                return
        want = [stored_form(ev) for ev in events]
        for name, options, kept in get_session_options(OPTION_EVENTS, _OPTION_TICK):
            got = check.call(str(p), f"get_session({name})", t.store.call("get_session", p.app, p.user, p.sid,
                                                                            options))
            if got is RAISED:
                continue
            if not expect_events(check, p, want[kept], got, f"get_session({name}) should give events "
                                 f"{list(range(kept.start, kept.stop))} of 0..{OPTION_EVENTS - 1}: "):
                return
            if got is not None and got.state.get("kept") != 1:
                check.add(str(p), f"get_session({name}) lost the session's state", {"kept": 1}, got.state)
                return


# --- create, state, isolation ------------------------------------------------------------


@clause(needs=NEEDS, races=True)
def adk_create_with_an_id_is_exclusive(t: Target) -> None:
    """A ``create_session`` with the id of an existing session raises and changes
    nothing of it; of creates with one id racing through every handle, exactly one
    returns and the session holds its state.

    Catches a create that checks for the id, then inserts (both callers "win", the
    second overwriting the first: two agents each believe they own a new conversation),
    an upsert (``INSERT OR REPLACE``, ``ON CONFLICT DO UPDATE``) that resets a session.
    """
    handles = t.handles()
    with checking(adk_create_with_an_id_is_exclusive, t.run) as check:
        p = _place(t, "adk-create")
        session = _create(check, t.store, p, {"k": "first"})
        if session is RAISED:
            return
        ev = event("user", texts=("kept",))
        want = [stored_form(ev)]
        if not _append(check, t.store, p, session, ev):
            return
        for h in handles:
            try:
                t.run(h.call("create_session", p.app, p.user, {"k": "second"}, p.sid))
                check.add(str(p), f"create_session() through the {h.label} with the id of an existing session "
                          "returned instead of raising (AlreadyExistsError)")
            except Exception:
                pass
        again = _get(check, t.store, p)
        if expect_events(check, p, want, again, "after a second create with its id: ") and \
                again.state.get("k") != "first":
            check.add(str(p), "a second create with the same id replaced the session's state", expected="first",
                      got=again.state.get("k"))
        for round_ in range(t.profile.race_rounds):
            t.tick()
            if not _racing_creates(t, check, _place(t, f"adk-create-race{round_}"), handles):
                return


def _racing_creates(t: Target, check: Check, p: _Place, handles: Any) -> bool:
    outcomes: list[Any] = [None] * 4

    def create(k: int) -> Callable[[], Awaitable[None]]:
        h = handles[k % len(handles)]

        async def run() -> None:
            try:
                outcomes[k] = await h.call("create_session", p.app, p.user, {"winner": k}, p.sid)
            except Exception as exc:
                outcomes[k] = exc
        return run

    calls = [create(k) for k in range(4)]
    t.rng.shuffle(calls)
    t.race(calls)
    won = [k for k, o in enumerate(outcomes) if not isinstance(o, Exception)]
    if len(won) != 1:
        errors = {describe_exception(o) for o in outcomes if isinstance(o, Exception)}
        check.add(str(p), f"of 4 racing creates with one id, {len(won)} returned (exactly one must; the others "
                  "raise): the create checks for the id, then inserts, with nothing between them locked"
                  + (f"; the others raised {shorten(sorted(errors), 200)}" if errors else ""),
                  expected="1 create returned", got=f"{len(won)} creates returned")
        return False
    stored = _get(check, t.store, p)
    if stored not in (None, RAISED) and stored.state.get("winner") != won[0]:
        check.add(str(p), f"the create that returned set winner={won[0]}, the session holds "
                  f"{shorten(stored.state)}: a losing create overwrote it", expected=won[0],
                  got=stored.state.get("winner"))
        return False
    return True


def _scoped(app_state: dict[str, Any], user_state: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    return {**own, **{f"app:{k}": v for k, v in app_state.items()}, **{f"user:{k}": v for k, v in user_state.items()}}


def _split(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    app = {k[4:]: v for k, v in delta.items() if k.startswith("app:")}
    user = {k[5:]: v for k, v in delta.items() if k.startswith("user:")}
    own = {k: v for k, v in delta.items() if not k.startswith(("app:", "user:", TEMP))}
    return app, user, own


@clause(needs=NEEDS)
def adk_state_deltas_apply_by_scope(t: Target) -> None:
    """State given to ``create_session`` and in events' ``state_delta`` lands in its
    scope, as ADK documents: ``app:`` keys in every session of the app, ``user:`` keys
    in every session of that user in that app, other keys in the session alone, and
    ``temp:`` keys nowhere stored (not in the state read back, not in the stored event).
    A later delta overwrites a key; values come back type for type.

    Catches ``temp:`` keys written to storage (they hold secrets and scratch data for
    one invocation), a delta applied both to its scope and to the session's own state
    (the session keeps a stale copy of ``app:``/``user:`` keys that another session
    changed), user state shared across apps, state read from the first event only.
    """
    with checking(adk_state_deltas_apply_by_scope, t.run) as check:
        app, user = t.new_session("app-state"), t.new_session("user-state")
        places = {
            "a": _Place(app, user, t.new_session("a")), "b": _Place(app, user, t.new_session("b")),
            "other user": _Place(app, user + "-2", t.new_session("c")),
            "other app": _Place(app + "-2", user, t.new_session("d")),
        }
        apps: dict[str, dict[str, Any]] = {}
        users: dict[tuple[str, str], dict[str, Any]] = {}
        owns: dict[str, dict[str, Any]] = {}
        sessions: dict[str, Any] = {}

        def apply(name: str, delta: dict[str, Any]) -> None:
            p = places[name]
            a, u, own = _split(delta)
            apps.setdefault(p.app, {}).update(copy.deepcopy(a))
            users.setdefault((p.app, p.user), {}).update(copy.deepcopy(u))
            owns.setdefault(name, {}).update(copy.deepcopy(own))

        initial: dict[str, dict[str, Any]] = {
            "a": {"n": 1, "f": 1.0, "app:theme": "dark", "user:lang": "de", "temp:secret": "t0"},
            "b": {"n": 2}, "other user": {"user:lang": "fr"}, "other app": {"app:theme": "light"},
        }
        for name, state in initial.items():
            sessions[name] = _create(check, t.store, places[name], copy.deepcopy(state))
            if sessions[name] is RAISED:
                return
            apply(name, state)
        steps = [
            ("a", {"n": 10, "user:lang": "en", "temp:scratch": [1], "list": [1, True, None]}),
            ("b", {"app:theme": "blue", "app:count": 1, "user:seen": True}),
            ("a", {"f": 2.5, "user:lang": "it", "app:count": 2.0}),
            ("b", {"n": 20, "temp:x": {"deep": 1}}),
        ]
        for n, (name, delta) in enumerate(steps):
            ev = event("agent", texts=(f"delta {n}",), state_delta=copy.deepcopy(delta))
            form = stored_form(ev)
            if not _append(check, t.store, places[name], sessions[name], ev):
                return
            apply(name, delta)
            for other, p in places.items():
                got = _get(check, t.store, p)
                if got in (None, RAISED):
                    continue
                want = _scoped(apps.get(p.app, {}), users.get((p.app, p.user), {}), owns.get(other, {}))
                found = first_difference(want, dict(got.state))
                if found is not None:
                    path, a, b = found
                    temp = " (a temp: key was stored)" if path.startswith(f".{TEMP}") else ""
                    check.add(str(p), f"after delta {n} to session {name!r}, session {other!r}'s state differs at "
                              f"{path}: want {shorten(a, 60)}, got {shorten(b, 60)}{temp}", expected=want,
                              got=dict(got.state))
                    return
                if other == name:
                    events = [dump(e) for e in got.events]
                    if events and not same_value(form, events[-1]):
                        check.add(str(p), f"the stored event of delta {n} differs: {describe_item(form, events[-1])}"
                                  + (" (a temp: key was stored)" if "temp:" in str(events[-1].get("actions")) else ""),
                                  form.get("actions"), events[-1].get("actions"))
                        return


def _confusables(prefix: str) -> list[str]:
    return list(dict.fromkeys(confusable_ids(prefix)))


@clause(needs=NEEDS, cost=2)
def adk_sessions_are_isolated(t: Target) -> None:
    """Sessions keyed by (app, user, id) never see each other's events, however alike
    the ids: session ids, user ids and app names differing by case, trailing or
    leading spaces, NFC vs NFD, SQL wildcards, a NUL, past the 64th and 128th character,
    and every ASCII punctuation inside each of app, user and session id (app ``a`` with
    user ``b:u`` beside app ``a:b`` with user ``u``).
    An id the backend cannot hold may be refused: an exception that creates nothing,
    with the handle still usable, is a *limit* listed in the report; a create refused
    with "already exists" for an id never created is a merge, and a failure.

    Catches case- and accent-insensitive collations, PAD SPACE comparison, ids stripped
    of spaces (``InMemorySessionService``), truncated keys, a lookup by session id alone,
    a key joined as ``app:user:session`` with no escaping.
    """
    with checking(adk_sessions_are_isolated, t.run) as check:
        app, user = t.new_session("app-iso"), t.new_session("user-iso")
        prefix = t.new_session("iso-")
        places = [_Place(app, user, s) for s in _confusables(prefix)]
        short = ["a", "A", "a ", " a", "é", "e\u0301", "a%", "a_", "ab"]
        places += [_Place(app, f"{user}-{s}", "s") for s in short]
        places += [_Place(f"{app}-{s}", user, "s") for s in short]
        # The input model's composite keys: every ASCII punctuation inside each component.
        places += [_Place(*triple) for triple in inputs.composite_places(app, user, "s")]
        places = list({(p.app, p.user, p.sid): p for p in places}.values())
        made: list[tuple[_Place, Any, list[dict[str, Any]]]] = []
        refused: dict[str, list[str]] = {}
        for i, p in enumerate(places):
            try:
                session = t.run(t.store.call("create_session", p.app, p.user, {"owner": i}, p.sid))
            except Exception as exc:
                if "exist" in str(exc).lower():
                    check.add(str(p), f"create_session() of {p.sid!r} (user {p.user!r}, app {p.app!r}) raised "
                              f"{describe_exception(exc)}, though no session had that id: ids are merged "
                              + _why_merged(p, places[:i]))
                else:
                    _refusal(t, check, p, exc, refused)
                continue
            ev = event("user", texts=(f"owned by #{i}",))
            form = stored_form(ev)
            if _append(check, t.store, p, session, ev):
                made.append((p, i, [form]))
        for p, i, want in made:
            got = _get(check, t.store, p)
            if got in (None, RAISED):
                _events_of(check, p, got, "reading its events back")
                continue
            if got.state.get("owner") != i:
                check.add(str(p), f"session #{i} holds session #{got.state.get('owner')}'s state: two ids "
                          "are one session", expected=f"owner {i}", got=f"owner {got.state.get('owner')}")
                continue
            expect_events(check, p, want, got, f"session #{i}: ")
        for reason, which in refused.items():
            t.limits.append(f"{len(which)} id(s) refused ({reason}): " + ", ".join(
                shorten(s, 40) for s in which[:6]) + (" ..." if len(which) > 6 else ""))


def _why_merged(p: _Place, earlier: list[_Place]) -> str:
    """Why a create found an id taken: a joined key, else a collation or a cut."""
    for c in inputs.PUNCTUATION:
        key = c.join((p.app, p.user, p.sid))
        other = next((q for q in earlier if c.join((q.app, q.user, q.sid)) == key), None)
        if other is not None:
            return (f"(app {other.app!r}, user {other.user!r}, session {other.sid!r} join to the same key under "
                    f"{c!r}: a key built as app{c}user{c}session without escaping the separator)")
    return "(compared case-insensitively, stripped or truncated)"


def _refusal(t: Target, check: Check, p: _Place, error: Exception, refused: dict[str, list[str]]) -> None:
    """A refused create is a limit when it created nothing and the handle still works."""
    try:
        after = t.run(t.store.call("get_session", p.app, p.user, p.sid))
    except Exception:
        after = None
    if after is not None:
        check.add(str(p), f"create_session() raised {describe_exception(error)} and still created the session")
        return
    probe = _place(t, "adk-iso-probe")
    try:
        t.run(t.store.call("create_session", probe.app, probe.user, None, probe.sid))
    except Exception as exc:
        check.add(str(p), f"refusing id {p.sid!r} ({describe_exception(error)}) left the handle unusable: the next "
                  f"create failed ({describe_exception(exc)}); roll back the failed transaction")
        return
    refused.setdefault(_reason(error), []).append(str(p))


def _reason(error: Exception) -> str:
    """The exception's type and its message without a driver's wrapping: ``DBAPIError: value
    too long for type character varying(128)``."""
    text = describe_exception(error)
    kind, _, message = text.partition(": ")
    return f"{kind}: {message.rsplit(') ', 1)[-1]}"[:100]


@clause(needs=NEEDS)
def adk_list_sessions_lists_the_users(t: Target) -> None:
    """``list_sessions(app, user)`` lists exactly that user's sessions in that app: not
    another user's (whose id differs by case or a trailing space, or extends it past any
    ASCII punctuation: ``u:x`` beside ``u``), not another app's,
    not a deleted one; each listed without its events; ``list_sessions(app)`` with no
    user lists every user's sessions in the app and no other app's; an unknown user gets
    an empty list; a session never created reads as ``None``.

    Catches a listing by ``LIKE`` or by a case-insensitive collation, a listing filtered
    by app only, a prefix scan of ``app:user:`` keys, a delete that leaves the session listed,
    a listing that returns whole sessions with their events, one that needs a user.
    """
    with checking(adk_list_sessions_lists_the_users, t.run) as check:
        app, user = t.new_session("app-list"), t.new_session("user-list")
        mine = [t.new_session("mine") for _ in range(3)]
        others = [(app, user.upper()), (app, user + " "), (app, user + "%"), (app + "-2", user)]
        others += [(app, f"{user}{c}x") for c in inputs.PUNCTUATION]
        for sid in mine:
            _create(check, t.store, _Place(app, user, sid))
        for a, u in others:
            _create(check, t.store, _Place(a, u, t.new_session("theirs")))
        first = _Place(app, user, mine[0])
        held = _get(check, t.store, first)
        if held not in (RAISED, None):
            _append(check, t.store, first, held, event("user", texts=("listed without me",)))
        listed = check.call(user, "list_sessions()", t.store.call("list_sessions", app, user))
        if listed is not RAISED and sorted(s.id for s in listed) != sorted(mine):
            check.add(user, "list_sessions() did not list exactly the user's sessions", expected=sorted(mine),
                      got=sorted(s.id for s in listed))
        for s in listed if listed is not RAISED else ():
            if (s.app_name, s.user_id) != (app, user) or s.events:
                check.add(user, f"list_sessions() returned session {s.id!r} " + (
                    f"with {len(s.events)} event(s): a listed session carries none (ADK's services list "
                    "sessions without their events)" if s.events else
                    f"under app {s.app_name!r} and user {s.user_id!r}"), expected="no events", got=shorten(dump(s)))
                break
        everyone = check.call(app, "list_sessions() of every user", t.store.call("list_sessions", app, None))
        theirs = [a for a, _ in others].count(app)
        if everyone is not RAISED and (sorted(s.id for s in everyone if s.user_id == user) != sorted(mine)
                                       or len(everyone) != len(mine) + theirs or any(s.app_name != app
                                                                                     for s in everyone)):
            check.add(app, "list_sessions() with no user did not list exactly the app's sessions, every user's",
                      expected=f"{len(mine) + theirs} sessions", got=sorted((s.user_id, s.id) for s in everyone))
        if check.call(user, "delete_session()", t.store.call("delete_session", app, user, mine[0])) is RAISED:
            return
        listed = check.call(user, "list_sessions() after a delete", t.store.call("list_sessions", app, user))
        if listed is not RAISED and sorted(s.id for s in listed) != sorted(mine[1:]):
            check.add(user, "list_sessions() after deleting one session", expected=sorted(mine[1:]),
                      got=sorted(s.id for s in listed))
        nobody = t.new_session("nobody")
        listed = check.call(nobody, "list_sessions() of a user with none", t.store.call("list_sessions", app, nobody))
        if listed is not RAISED and listed:
            check.add(nobody, "list_sessions() of a user with no session was not empty", [], [s.id for s in listed])
        never = _Place(app, user, t.new_session("never"))
        got = _get(check, t.store, never)
        if got not in (None, RAISED):
            check.add(str(never), f"get_session() of a session never created returned {shorten(got)}, not None")


@clause(needs=NEEDS)
def adk_delete_removes_only_that_session(t: Target) -> None:
    """``delete_session`` removes that session and its events and nothing else: the
    user's other sessions keep their events and state, and so does every session id
    the input model relates to a deleted one (``x<c>y`` for every ASCII punctuation
    ``c``, ``A`` for ``%41``, ``case`` for ``Case``, ``w`` with whitespace around it);
    ``app:`` and ``user:`` state stay, and a session created again with the deleted id
    starts empty.

    Catches a delete by a pattern or prefix (``LIKE 'id%'``, ``SCAN MATCH id*``) or by
    user (every session of the user gone), a ``LIKE`` where ``=`` was meant (case
    ignored), a delete that leaves the events rows (they come back when the id is reused), a delete that
    drops the user's state with the session.
    """
    with checking(adk_delete_removes_only_that_session, t.run) as check:
        app, user = t.new_session("app-del"), t.new_session("user-del")
        gone, kept = (_Place(app, user, t.new_session(s)) for s in ("gone", "kept"))
        wants: dict[str, list[dict[str, Any]]] = {}
        for p in (gone, kept):
            session = _create(check, t.store, p, {"app:a": 1, "user:u": 2, "own": str(p)} if p is gone else None)
            if session is RAISED:
                return
            ev = event("user", texts=(f"in {p.sid}",))
            wants[str(p)] = [stored_form(ev)]
            _append(check, t.store, p, session, ev)
        if check.call(str(gone), "delete_session()", t.store.call("delete_session", app, user, gone.sid)) is RAISED:
            return
        got = _get(check, t.store, gone)
        if got not in (None, RAISED):
            check.add(str(gone), "get_session() of a deleted session did not return None", None, shorten(got))
        after = _get(check, t.store, kept)
        if expect_events(check, kept, wants[str(kept)], after, "deleting another session changed this one: ") \
                and (after.state.get("app:a"), after.state.get("user:u")) != (1, 2):
            check.add(str(kept), "deleting a session dropped the app: or user: state", (1, 2),
                      (after.state.get("app:a"), after.state.get("user:u")))
        again = _create(check, t.store, gone)
        if again is not RAISED:
            expect_events(check, gone, [], _get(check, t.store, gone), "a session created again after a delete: ")
            if again.state.get("own") is not None:
                check.add(str(gone), "a session created again after a delete has the deleted one's state")
    _delete_leaves_related_sessions(t)


def _delete_leaves_related_sessions(t: Target) -> None:
    """Delete one side of every relation of the input model (``x``, ``%41``, ``Case``,
    ``w``) as a session id: the other side keeps its events. Ids the service refuses,
    or that do not read back their own event (``adk_related_ids_stay_apart``'s
    failures), are left out."""
    app, user = t.new_session("app-del-rel"), t.new_session("user-del-rel")
    relations = inputs.clear_relations(t.new_session("del-rel-"))
    setup = Check(adk_delete_removes_only_that_session, t.run)
    wants: dict[str, list[dict[str, Any]]] = {}
    for sid in dict.fromkeys(s for r in relations for s in (r.cleared, r.kept)):
        p = _Place(app, user, sid)
        session = _create(setup, t.store, p)
        ev = event("user", texts=(f"in {sid}",))
        if session is not RAISED and _append(setup, t.store, p, session, ev) and \
                expect_events(setup, p, [stored_form(ev)], _get(setup, t.store, p)):
            wants[sid] = [stored_form(ev)]
    with checking(adk_delete_removes_only_that_session, t.run) as check:
        changed: set[str] = set()
        deleted = [s for s in dict.fromkeys(r.cleared for r in relations) if s in wants]
        for gone in deleted:
            if check.call(gone, "delete_session()", t.store.call("delete_session", app, user, gone)) is RAISED:
                return
            for r in relations:
                if r.cleared == gone and r.kept in wants and r.kept not in changed:
                    p = _Place(app, user, r.kept)
                    if not expect_events(check, p, wants[r.kept], _get(check, t.store, p),
                                         f"deleting another session changed this one: delete_session({gone!r}) "
                                         f"reached {r.kept!r} ({r.relation}: {r.describe('delete')}): "):
                        changed.add(r.kept)
        for gone in deleted:
            got = _get(check, t.store, _Place(app, user, gone))
            if got not in (None, RAISED):
                check.add(str(_Place(app, user, gone)), "get_session() of a deleted session did not return None",
                          None, shorten(got))


# --- replicas, fresh backends, stale sessions ---------------------------------------------


@clause(needs=NEEDS, replica=True)
def adk_replicas_see_each_others_appends(t: Target) -> None:
    """What one service appends, creates or deletes, another service on the same backend
    sees at once: a session created through one is read through the other, appends
    alternating between them (each on the session it just read) all land in order.

    Catches a per-service cache of sessions, events kept in process memory, a session
    object whose events the service trusts instead of reading storage.
    """
    assert t.replica is not None
    one, two = t.store, t.replica
    with checking(adk_replicas_see_each_others_appends, t.run) as check:
        p = _place(t, "adk-replicas")
        if _create(check, one, p) is RAISED:
            return
        want: list[dict[str, Any]] = []
        for n in range(6):
            writer, reader = (two, one) if n % 2 == 0 else (one, two)
            session = _get(check, writer, p)
            if session in (None, RAISED):
                _events_of(check, p, session, f"read through the {writer.label}")
                return
            ev = event("agent", texts=(f"through the {writer.label} #{n}",))
            want.append(stored_form(ev))
            if not _append(check, writer, p, session, ev):
                return
            if not expect_events(check, p, want, _get(check, reader, p),
                                 f"what the {writer.label} appended, read through the {reader.label}: "):
                return
        if check.call(str(p), "delete_session()", two.call("delete_session", p.app, p.user, p.sid)) is not RAISED:
            got = _get(check, one, p)
            if got not in (None, RAISED):
                check.add(str(p), f"a session deleted through the {two.label} is still there through the {one.label}")


@clause(needs=NEEDS, races=True)
def adk_first_calls_on_a_fresh_backend_succeed(t: Target) -> None:
    """Four services opened on a fresh backend (a new database or directory each round)
    and making their first calls at once all succeed: three create a session and
    append to it, one reads a session that does not exist.

    Catches tables created on first use without ``IF NOT EXISTS`` or a lock ("table
    already exists", "duplicate key value violates unique constraint
    pg_type_typname_nsp_index"), the schema-version row inserted by check-then-insert.
    """
    with checking(adk_first_calls_on_a_fresh_backend_succeed, t.run) as check:
        for round_ in range(max(3, t.profile.race_rounds // 2)):
            t.tick()
            with fresh_fixtures(t.fixtures) as fixtures:
                errors = t.run(_fresh_round(t, fixtures, round_))
            for error in errors[:3]:
                check.add(f"fresh backend #{round_}", f"a first call on a fresh backend raised {error}: make table "
                          "creation and the first rows idempotent under concurrency (IF NOT EXISTS, a lock)")
            if check.violations:
                return


async def _fresh_round(t: Target, fixtures: dict[str, Any], round_: int) -> list[str]:
    errors: list[str] = []
    app, user = t.new_session(f"app-fresh{round_}"), t.new_session("user")

    def first(h: Handle, k: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            try:
                if k == 3:
                    await h.call("get_session", app, user, "never")
                    return
                session = await h.call("create_session", app, user, {"k": k}, f"s{k}")
                await h.call("append_event", session, event("user", texts=(f"first {k}",)))
            except Exception as exc:
                errors.append(f"through {h.label}: {describe_exception(exc)}")
        return run

    async with open_handles(t, fixtures, 4) as handles:
        await races.together([first(h, k) for k, h in enumerate(handles)], threads=False)
        for k in range(3):
            try:
                got = await handles[0].call("get_session", app, user, f"s{k}")
            except Exception as exc:
                errors.append(f"get_session() after the first calls: {describe_exception(exc)}")
                continue
            if not errors and (got is None or [e.content.parts[0].text for e in got.events] != [f"first {k}"]):
                errors.append(f"session s{k} lost its first event (got {shorten(got)})")
    return errors


@clause(needs=NEEDS)
def adk_stale_session_append_loses_nothing(t: Target) -> None:
    """An append through a session object that another caller has since appended to
    (a stale copy) either raises (ADK allows ``StaleSessionError``) and stores nothing
    of it, or appends it: either way no event is lost or stored twice. The report says
    which the service does.

    Catches a service that writes the stale copy's events back (the other caller's event
    lost), one that raises after storing the event (a retry stores it twice), and one that
    appends only to the stale object in memory.
    """
    handles = t.handles()
    with checking(adk_stale_session_append_loses_nothing, t.run) as check:
        p = _place(t, "adk-stale")
        if _create(check, t.store, p) is RAISED:
            return
        before = event("user", texts=("before both",))
        first = stored_form(before)
        fresh = _get(check, t.store, p)
        if fresh in (None, RAISED) or not _append(check, t.store, p, fresh, before):
            return
        one, two = handles[0], handles[-1]
        mine, stale = _get(check, one, p), _get(check, two, p)
        if RAISED in (mine, stale) or None in (mine, stale):
            return
        winner, late = event("agent", texts=("appended first",)), event("agent", texts=("appended on a stale copy",))
        want = [first, stored_form(winner)]
        late_form = stored_form(late)
        if not _append(check, one, p, mine, winner):
            return
        try:
            t.run(two.call("append_event", stale, late))
            outcome, want = "appends it", [*want, late_form]
        except Exception as exc:
            outcome = f"raises {type(exc).__name__}"
        t.limits.append(f"an append on a stale session object {outcome}")
        expect_events(check, p, want, _get(check, t.store, p), f"after an append on a stale session ({outcome}): ")


__all__ = ["corpus", "expect_events", "stored_form"]
