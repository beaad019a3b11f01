"""filter_capacity: a Cinder or Manila pool has room for the volume or share.

Cinder's and Manila's CapacityFilter (``cinder/scheduler/filters/capacity_filter.py``):
free space less ``reserved_percentage`` of the total must hold the size; with thin
provisioning (the type does not ask for thick — Cinder's and Manila's
``use_thin_logic``: ``provisioning:type`` other than ``thick`` in Cinder,
``thin_provisioning`` absent or true (``<is> True``) in Manila — and the pool
supports it with ``max_over_subscription_ratio >= 1``) the provisioned ratio
after placement must stay within ``max_over_subscription_ratio`` and the free space
times that ratio must hold the size. Not run for ``extend_volume``: the new size is
not in the body. Invert: none; drop the step (the caller's own CapacityFilter ran).
"""

from __future__ import annotations

import math

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, StorageRequest
from cortex.rules.extra_specs import match


@register
class CapacityFilter(Filter[StorageRequest, StoragePoolState]):
    """Remove pools that cannot hold the requested size."""

    name = "filter_capacity"
    services = ("cinder", "manila")

    def applies(self, request: StorageRequest) -> bool:
        """Not for extends (size unknown) nor for empty sizes."""
        return request.intent != "extend_volume" and request.size > 0

    def check(self, pool: StoragePoolState, request: StorageRequest,
              candidate: Candidate) -> str | None:
        """Reason when the pool cannot hold ``request.size`` GiB."""
        if pool.total_capacity_gb <= 0:
            return "pool reports no capacity"
        size = request.size
        free = pool.free_capacity_gb - math.floor(
            pool.total_capacity_gb * pool.reserved_percentage / 100)
        if wants_thin(request) and pool.thin_provisioning_support \
                and pool.max_over_subscription_ratio >= 1:
            ratio = (pool.provisioned_capacity_gb + size) / pool.total_capacity_gb
            if ratio > pool.max_over_subscription_ratio:
                return (f"provisioned ratio {ratio:.2f} would exceed "
                        f"max_over_subscription_ratio {pool.max_over_subscription_ratio:g}")
            if free * pool.max_over_subscription_ratio < size:
                return f"virtual free {free * pool.max_over_subscription_ratio:g} GiB < {size} GiB"
            return None
        if free < size:
            return f"free {free:g} GiB < {size} GiB"
        return None


def wants_thin(request) -> bool:
    """Whether the volume/share type asks for (or defaults to) thin provisioning.

    Cinder's and Manila's ``use_thin_logic`` (``cinder/scheduler/utils.py``,
    ``manila/scheduler/utils.py``): thin unless the type says thick.
    """
    if request.service == "cinder":
        kind = request.volume_type.extra_specs.get("provisioning:type")
        return kind != "thick"
    specs = request.share_type.extra_specs
    value = specs.get("thin_provisioning", specs.get("capabilities:thin_provisioning"))
    return value is None or match(True, value)
