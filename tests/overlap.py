"""The profile the tests that count overlapping calls run: "most rounds of a race
overlapped" is counted over its rounds, and two, the default profile's, leave no room
for one round whose callers happened not to meet (the race engine's property, not the
profile's: six rounds, as the default profile ran before it ran two)."""

from __future__ import annotations

import dataclasses

from storetest._engine.profiles import PROFILES

SIX_ROUNDS = dataclasses.replace(PROFILES["fast"], race_rounds=6)
