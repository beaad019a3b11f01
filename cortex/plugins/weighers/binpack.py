"""weigher_binpack: prefer hosts that would be fullest after placing the request.

The raw weight is the weighted mean, over ``resource_weights``, of the fraction of
the node's capacity (``(total - reserved) * allocation_ratio``) used after the
request's amounts are added; classes the request does not ask for count with their
current use. A positive multiplier packs (fill hosts before opening new ones, as
Nova's RAM/CPU weighers do with negative multipliers); a negative multiplier
spreads. Classes the host has no inventory of are left out of the mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.plugins.base import Weigher
from cortex.plugins.registry import register


@dataclass(frozen=True)
class BinpackOptions:
    """``resource_weights``: resource class -> its weight in the mean (>= 0)."""

    resource_weights: dict[str, float] = field(
        default_factory=lambda: {"VCPU": 1.0, "MEMORY_MB": 1.0})

    def __post_init__(self) -> None:
        """Reject negative weights and an all-zero table."""
        if any(w < 0 for w in self.resource_weights.values()) or not any(
                self.resource_weights.values()):
            raise ValueError("resource_weights must be >= 0 and not all 0")


@register
class BinpackWeigher(Weigher):
    """Utilisation after placement, weighted per resource class (0..1, may exceed 1)."""

    name = "weigher_binpack"
    Options = BinpackOptions

    def weigh(self, host, request, candidate) -> float:
        """Weighted mean utilisation of the first named node after placement."""
        node = host.nodes_named(candidate.nodes)[0]
        total = weight_sum = 0.0
        for rc, weight in self.options.resource_weights.items():
            inventory = node.inventories.get(rc)
            if inventory is None or inventory.capacity <= 0 or weight == 0:
                continue
            used = inventory.used + request.resources.get(rc, 0)
            total += weight * used / inventory.capacity
            weight_sum += weight
        return total / weight_sum if weight_sum else 0.0
