"""filter_pool_capabilities: the pool meets the volume or share type's extra specs.

Cinder's CapabilitiesFilter (``cinder/scheduler/filters/capabilities_filter.py``) and
Manila's (``manila/scheduler/filters/capabilities.py`` with
``manila/scheduler/utils.py:capabilities_satisfied``): each extra spec that is
unscoped or scoped ``capabilities:`` (``capabilities:a:b`` walks nested capabilities)
must be met by the pool's capability of that name, with every extra-spec operator
including ``<is>`` (:mod:`cortex.rules.extra_specs`); a list capability passes when
one element does; a missing capability fails the pool; other scopes (``RESKEY:``,
``provisioning:``, ``netapp:``...) are ignored, and so is Manila's
``availability_zones`` (the AZ filter's business). The capabilities are the pool's
reported capabilities plus its capacity fields (``thin_provisioning_support``,
``total_capacity_gb``, ...), as Cinder's and Manila's pool states hold them: driver
booleans like ``driver_handles_share_servers``, ``snapshot_support`` or
``create_share_from_snapshot_support`` and protocol lists like ``storage_protocol``.
Invert: none; drop the step.
"""

from __future__ import annotations

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, StorageRequest
from cortex.rules.extra_specs import unmet

MANILA_IGNORED = frozenset({"availability_zones", "capabilities:availability_zones"})


@register
class PoolCapabilitiesFilter(Filter[StorageRequest, StoragePoolState]):
    """Remove pools whose capabilities do not meet the type's extra specs."""

    name = "filter_pool_capabilities"
    services = ("cinder", "manila")

    def applies(self, request: StorageRequest) -> bool:
        """Only when the type has extra specs."""
        return bool(storage_type(request).extra_specs)

    def check(self, pool: StoragePoolState, request: StorageRequest,
              candidate: Candidate) -> str | None:
        """Reason naming the first unmet extra spec."""
        ignored = MANILA_IGNORED if request.service == "manila" else frozenset()
        return unmet(storage_type(request).extra_specs, pool_capabilities(pool),
                     "capabilities", any_element=True, ignored=ignored)


def storage_type(request):
    """The request's volume type (Cinder) or share type (Manila)."""
    return request.volume_type if request.service == "cinder" else request.share_type


def pool_capabilities(pool) -> dict:
    """The pool's capacity fields and reported capabilities (these win), by Cinder's names."""
    fields = {
        "total_capacity_gb": pool.total_capacity_gb, "free_capacity_gb": pool.free_capacity_gb,
        "allocated_capacity_gb": pool.allocated_capacity_gb,
        "provisioned_capacity_gb": pool.provisioned_capacity_gb,
        "reserved_percentage": pool.reserved_percentage,
        "max_over_subscription_ratio": pool.max_over_subscription_ratio,
        "thin_provisioning_support": pool.thin_provisioning_support,
        "thick_provisioning_support": pool.thick_provisioning_support,
    }
    return fields | dict(pool.capabilities)
