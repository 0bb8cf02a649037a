"""Deprecated: the durable session handle moved to :mod:`reference_stores.durable`.

It runs an agent's session over a log store; it judges nothing, so it left the testing
package. This alias keeps ``from storetest.durable import DurableSession`` working for one
release, with a :class:`DeprecationWarning`; it will then be removed.
"""

from __future__ import annotations

import warnings

from reference_stores.durable import *  # noqa: F403
from reference_stores.durable import __all__ as __all__

warnings.warn(
    "storetest.durable moved to reference_stores.durable; import it from there "
    "(the old path is removed in the next release)",
    DeprecationWarning,
    stacklevel=2,
)
