"""What a plain transcript + steer store does not claim: every other protocol's
capability, so the count tests follow the clauses as protocols are added."""

from storetest._engine.harness import CAPABILITIES

OTHER_PROTOCOLS = frozenset(CAPABILITIES) - {"transcript", "steers"}
