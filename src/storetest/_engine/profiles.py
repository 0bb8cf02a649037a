"""How hard a run tries: one small value per profile, read by the plugin, the command
and :func:`storetest.check` alike.

``fast`` is the default (seconds per store); ``ci`` doubles its examples and steps and
runs 32 race rounds to its 2; ``thorough`` is slow and opt-in. No deadline on a
clause or an example (a real database's latency is not the store's bug); only a call
that does not return at all is cut off, after ``call_timeout`` seconds, above any bound
a reference store puts on its own calls.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_PROFILE", "PROFILES", "Profile", "check_call_timeout", "check_idle", "profile_named"]

#: Seconds a store or factory call may take before it is reported stuck (every profile's).
DEFAULT_CALL_TIMEOUT: Final = 60.0


@dataclass(frozen=True)
class Profile:
    """One level of effort."""

    name: str
    #: Hypothesis examples per property.
    examples: int
    #: Operations in one run of the state machine (``store_matches_model``); long runs
    #: catch stores that misbehave only after many saves.
    model_steps: int
    #: Rounds of each concurrency clause; each round starts its callers together. One
    #: round catches nearly every racy broken store (scripts/race_rounds.py); a race
    #: that catches less per round runs a multiple of it.
    race_rounds: int
    #: Successful shrinks Hypothesis may make of one failure before it reports the
    #: smallest example found so far; a count, so a replay shrinks exactly the same.
    shrink_steps: int
    #: A backstop in seconds for stores so slow that the steps take too long; the
    #: report says when it cut shrinking short (a replay may then differ).
    shrink_seconds: float
    #: Successful shrinks of a failure whose first diagnosis names its cause (a line of
    #: the catalogue in ``storetest._engine.explain``): the line says what to fix and the
    #: example only shows it, so it is shrunk less, for a failing run about as long as a
    #: passing one (``benchmarks/failing_speed.py``). ``None``: as ``shrink_steps``.
    shrink_steps_named: int | None = None
    #: Seconds ``data_survives_idle`` waits between writing and reading back; ``None``
    #: (every profile's default) leaves that opt-in clause out.
    idle: float | None = None
    #: Child processes each crash clause kills (``reopen=`` runs them), and the seconds
    #: after which it stops killing, whichever comes first.
    crash_kills: int = 24
    crash_seconds: float = 40.0
    #: Seconds one call into the store or a factory may take; past it the call is a
    #: violation naming it, and the clause ends (see ``storetest._engine.stops``).
    call_timeout: float = DEFAULT_CALL_TIMEOUT


PROFILES: Final[dict[str, Profile]] = {
    p.name: p
    for p in (
        Profile("fast", examples=20, model_steps=50, race_rounds=2, shrink_steps=40, shrink_steps_named=6,
                shrink_seconds=3.0),
        Profile("ci", examples=40, model_steps=100, race_rounds=32, shrink_steps=100, shrink_steps_named=20,
                shrink_seconds=15.0, crash_kills=48, crash_seconds=80.0),
        Profile("thorough", examples=400, model_steps=300, race_rounds=160, shrink_steps=500,
                shrink_seconds=120.0, crash_kills=300, crash_seconds=600.0),
    )
}

DEFAULT_PROFILE: Final = "fast"


def profile_named(name: str | None) -> Profile:
    """The profile called ``name``; ``None`` means ``STORETEST_PROFILE`` or the default.

    :raises ValueError: no profile has that name.
    """
    name = name or os.environ.get("STORETEST_PROFILE") or DEFAULT_PROFILE
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown storetest profile {name!r}; choose one of {', '.join(PROFILES)}"
        ) from None


def _seconds(value: object, what: str) -> float | None:
    """``value`` as a finite number of seconds above zero, or ``None`` when unset."""
    if value is None:
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of seconds, not {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise ValueError(f"{what} must be a number of seconds above zero, not {value!r}")
    return seconds


def check_idle(idle: object) -> float | None:
    """``idle`` as seconds to wait in ``data_survives_idle``, or ``None`` to leave it out.

    :raises ValueError: not a finite number of seconds above zero.
    """
    return _seconds(idle, "idle")


def check_call_timeout(seconds: object) -> float | None:
    """``seconds`` as the call deadline, or ``None`` to keep the profile's.

    :raises ValueError: not a finite number of seconds above zero.
    """
    return _seconds(seconds, "call-timeout")
