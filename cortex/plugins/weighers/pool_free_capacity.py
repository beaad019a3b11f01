"""weigher_pool_free_capacity: prefer Cinder/Manila pools with more free space left.

The raw weight is the fraction of the pool's total capacity still free after the
request's size is placed (``(free - reserved - size) / total``, 0 for an empty
pool), so a positive multiplier spreads like Cinder's CapacityWeigher and a
negative one stacks volumes onto the fullest pool that passes the filters.
"""

from __future__ import annotations

from cortex.plugins.base import Weigher
from cortex.plugins.registry import register


@register
class PoolFreeCapacityWeigher(Weigher):
    """Free fraction of the pool after placement."""

    name = "weigher_pool_free_capacity"
    services = ("cinder", "manila")

    def weigh(self, pool, request, candidate) -> float:
        """``(free - reserved - size) / total`` in GiB terms."""
        if pool.total_capacity_gb <= 0:
            return 0.0
        reserved = pool.total_capacity_gb * pool.reserved_percentage / 100
        size = 0 if request.intent == "extend_volume" else request.size
        return (pool.free_capacity_gb - reserved - size) / pool.total_capacity_gb
