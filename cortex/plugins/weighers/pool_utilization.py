"""weigher_pool_utilization: steer volumes and shares away from busy storage.

The reference implementation's storage balancing (its NetApp CPU-usage weigher for
Manila): the raw weight is minus the pool's Prometheus ``feature`` — the pool's
utilization (``pool.utilization``) for Cinder, the storage node's CPU busy share
(``cpu.busy``) for Manila — mapped from ``[lower_bound, upper_bound]`` onto ``[0, 1]``
and clamped, so pools below the lower bound are equal and pools above the upper bound
all avoided. A positive multiplier balances load; a negative one would seek busy
pools. Pools without the feature weigh 0.

Deprecated spellings still read: the plugin name ``weigher_pool_utilisation``
(:data:`cortex.plugins.registry.DEPRECATED_NAMES`) and, with the default ``feature``,
a pool feature named ``pool.utilisation`` when ``pool.utilization`` is absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Weigher
from cortex.plugins.bounds_options import FeatureBoundsOptions
from cortex.plugins.registry import register
from cortex.request import Candidate, StorageRequest
from cortex.rules.measures import bounded

FEATURE = "pool.utilization"
#: The feature's former spelling, read when the default feature is absent.
DEPRECATED_FEATURE = "pool.utilisation"


@dataclass(frozen=True)
class PoolUtilizationOptions(FeatureBoundsOptions):
    """The pool feature (default ``pool.utilization``) and the bounds, 0.5 and 0.9."""

    feature: str = FEATURE


@register
class PoolUtilizationWeigher(Weigher[StorageRequest, StoragePoolState]):
    """Minus the bounded utilization of the pool."""

    name = "weigher_pool_utilization"
    host_only = True
    services = ("cinder", "manila")
    Options = PoolUtilizationOptions

    def weigh(self, pool: StoragePoolState, request: StorageRequest,
              candidate: Candidate) -> float:
        """``-bounded(feature)`` in ``[-1, 0]``."""
        name = self.options.feature
        value = pool.features.get(name)
        if value is None and name == FEATURE:
            value = pool.features.get(DEPRECATED_FEATURE)
        return -bounded(float(value or 0.0), self.options.lower_bound, self.options.upper_bound)
