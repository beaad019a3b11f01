"""weigher_binpack: prefer hosts that would be fullest after placing the request.

The raw weight is the weighted mean, over ``resource_weights``, of the fraction of
the node's capacity (``(total - reserved) * allocation_ratio``) used after the
request's amounts are added; classes the request does not ask for count with their
current use. A positive multiplier packs (fill hosts before opening new ones, as
Nova's RAM/CPU weighers do with negative multipliers); a negative multiplier
spreads. Classes the host has no inventory of are left out of the mean.
"""

from __future__ import annotations

from collections.abc import Sequence

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher, host_facts
from cortex.plugins.measure_options import ResourceWeightsOptions
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class BinpackWeigher(Weigher[NovaRequest, HostState]):
    """Utilization after placement, weighted per resource class (0..1, may exceed 1)."""

    name = "weigher_binpack"
    Options = ResourceWeightsOptions

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """Weighted mean utilization of the first named node after placement."""
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

    def weigh_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> list[float]:
        """``weigh`` of every host, each single-node host's inventories read once per view."""
        key = (self.name, repr(self.options), request.service)
        terms = host_facts(view, key, hosts, self.terms)
        resources = request.resources
        weights = []
        for (candidate, state), entries in zip(hosts, terms, strict=True):
            if entries is None:
                weights.append(self.weigh(state, request, candidate))
                continue
            total = weight_sum = 0.0
            for rc, weight, used, capacity in entries:
                total += weight * (used + resources.get(rc, 0)) / capacity
                weight_sum += weight
            weights.append(total / weight_sum if weight_sum else 0.0)
        return weights

    def terms(self, host) -> tuple | None:
        """``((rc, weight, used, capacity), ...)`` that ``weigh`` sums, for a single-node host.

        None for a host with several nodes (which node counts depends on the caller).
        """
        if len(host.all_nodes) != 1:
            return None
        inventories = host.all_nodes[0].inventories
        return tuple((rc, weight, inventories[rc].used, inventories[rc].capacity)
                     for rc, weight in self.options.resource_weights.items()
                     if rc in inventories and inventories[rc].capacity > 0 and weight != 0)
