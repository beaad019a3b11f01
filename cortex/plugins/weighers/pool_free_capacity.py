"""weigher_pool_free_capacity: prefer Cinder/Manila pools with more free space left.

Cinder's and Manila's CapacityWeigher (``cinder/scheduler/weights/capacity.py``): the
raw weight is the share of the pool's capacity still free after the request's size is
placed. Thick: ``(free - reserved - size) / total``. Thin (``thin_aware``, the type
asks for thin and the pool supports it with ``max_over_subscription_ratio >= 1``):
the virtual capacity ``total * ratio`` counts, less what is provisioned and reserved:
``(total * ratio - provisioned - reserved - size) / (total * ratio)``, as Cinder
weighs thin pools by ``total * ratio - provisioned``. Reserved is
``reserved_percentage`` of ``total``. 0 for an empty pool. A positive multiplier
spreads (Cinder's default ``capacity_weight_multiplier = 1.0``); a negative one stacks
onto the fullest pool that passes the filters.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Weigher
from cortex.plugins.filters.capacity import wants_thin
from cortex.plugins.registry import register
from cortex.request import Candidate, StorageRequest


@dataclass(frozen=True)
class PoolFreeCapacityOptions:
    """``thin_aware``: weigh thin pools by their virtual (over-subscribed) capacity."""

    thin_aware: bool = True


@register
class PoolFreeCapacityWeigher(Weigher[StorageRequest, StoragePoolState]):
    """Free (virtual, when thin) share of the pool after placement."""

    name = "weigher_pool_free_capacity"
    services = ("cinder", "manila")
    Options = PoolFreeCapacityOptions

    def weigh(self, pool: StoragePoolState, request: StorageRequest, candidate: Candidate) -> float:
        """The free share in GiB terms, see the module docstring."""
        if pool.total_capacity_gb <= 0:
            return 0.0
        reserved = pool.total_capacity_gb * pool.reserved_percentage / 100
        size = 0 if request.intent == "extend_volume" else request.size
        if self.options.thin_aware and wants_thin(request) and \
                pool.thin_provisioning_support and pool.max_over_subscription_ratio >= 1:
            virtual = pool.total_capacity_gb * pool.max_over_subscription_ratio
            return (virtual - pool.provisioned_capacity_gb - reserved - size) / virtual
        return (pool.free_capacity_gb - reserved - size) / pool.total_capacity_gb
