"""weigher_pool_utilisation: steer volumes and shares away from busy storage.

The reference implementation's storage balancing (its NetApp CPU-usage weigher for
Manila): the raw weight is minus the pool's Prometheus ``feature`` — the pool's
utilisation (``pool.utilisation``) for Cinder, the storage node's CPU busy share
(``cpu.busy``) for Manila — mapped from ``[lower_bound, upper_bound]`` onto ``[0, 1]``
and clamped, so pools below the lower bound are equal and pools above the upper bound
all avoided. A positive multiplier balances load; a negative one would seek busy
pools. Pools without the feature weigh 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    StorageRequest,
)
from cortex.rules.measures import bounded, feature


@dataclass(frozen=True)
class PoolUtilisationOptions:
    """The pool feature and the bounds (fractions) between which its effect grows."""

    feature: str = "pool.utilisation"
    lower_bound: float = 0.5
    upper_bound: float = 0.9


@register
class PoolUtilisationWeigher(Weigher[StorageRequest, StoragePoolState]):
    """Minus the bounded utilisation of the pool."""

    name = "weigher_pool_utilisation"
    host_only = True
    services = ("cinder", "manila")
    Options = PoolUtilisationOptions

    def weigh(self, pool: StoragePoolState, request: StorageRequest, candidate: Candidate) -> float:
        """``-bounded(feature)`` in ``[-1, 0]``."""
        value = feature(pool.features, self.options.feature)
        return -bounded(value, self.options.lower_bound, self.options.upper_bound)
