"""weigher_prefer_smaller_hosts: prefer small hosts, keeping big ones free for big requests.

The reference implementation's "prefer smaller hosts" weigher: the raw weight is the
weighted mean, over ``resource_weights``, of ``1 - capacity / largest capacity`` where
the largest is taken among the hosts the caller offered (Placement capacity
``(total - reserved) * allocation_ratio``, best named node). The largest host weighs
0, a host half its size 0.5. A positive multiplier prefers small hosts; a negative
one prefers big hosts. Classes no offered host has are left out of the mean.
"""

from __future__ import annotations

from types import MappingProxyType

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.measure_options import ResourceWeightsOptions
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class PreferSmallerHostsWeigher(Weigher[NovaRequest, HostState]):
    """One minus the host's capacity relative to the largest offered host."""

    name = "weigher_prefer_smaller_hosts"
    Options = ResourceWeightsOptions
    largest: MappingProxyType = MappingProxyType({})

    def bind(self, request: NovaRequest, view: KnowledgeView) -> PreferSmallerHostsWeigher:
        """A copy holding the largest capacity per class among the offered known hosts."""
        largest: dict[str, float] = {}
        for candidate in request.candidates:
            state = view.hosts.get(candidate.host)
            for rc in self.options.resource_weights:
                if state is not None:
                    largest[rc] = max(largest.get(rc, 0.0), capacity(state, candidate, rc))
        bound = PreferSmallerHostsWeigher(self.options)
        bound.largest = MappingProxyType(largest)
        return bound

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """Weighted mean of ``1 - capacity / largest`` (0..1)."""
        total = weight_sum = 0.0
        for rc, weight in self.options.resource_weights.items():
            largest = self.largest.get(rc, 0.0)
            if largest <= 0 or weight == 0:
                continue
            total += weight * (1 - capacity(host, candidate, rc) / largest)
            weight_sum += weight
        return total / weight_sum if weight_sum else 0.0


def capacity(host, candidate, rc: str) -> float:
    """The largest capacity of ``rc`` among the named nodes (0 without inventory)."""
    return max((n.inventories[rc].capacity for n in host.nodes_named(candidate.nodes)
                if rc in n.inventories), default=0.0)
