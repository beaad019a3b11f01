"""weigher_pool_allocated_capacity: prefer pools with less capacity allocated to volumes.

Cinder's AllocatedCapacityWeigher (``cinder/scheduler/weights/capacity.py``): the raw
weight is the pool's ``allocated_capacity_gb`` (the sum of the sizes of the volumes
Cinder placed there) as a share of its ``total_capacity_gb`` (may exceed 1 when thin).
As in Cinder (``allocated_capacity_weight_multiplier = -1.0``), a negative multiplier
spreads volumes to the least allocated pools; a positive one stacks them. Pools
reporting no capacity weigh 0.
"""

from __future__ import annotations

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, StorageRequest


@register
class PoolAllocatedCapacityWeigher(Weigher[StorageRequest, StoragePoolState]):
    """Allocated share of the pool."""

    name = "weigher_pool_allocated_capacity"
    host_only = True
    services = ("cinder", "manila")

    def weigh(self, pool: StoragePoolState, request: StorageRequest, candidate: Candidate) -> float:
        """``allocated_capacity_gb / total_capacity_gb``."""
        if pool.total_capacity_gb <= 0:
            return 0.0
        return pool.allocated_capacity_gb / pool.total_capacity_gb
