"""weigher_network_domain: prefer the hosts of the network domain chosen for the group.

The soft preference of group placement, on the domain chosen by the reference topology-aware
scheduler's rules (:mod:`cortex.rules.network_domains`). Raw weight for a
``consolidated`` group: 1 for a host in the chosen leaves, 0.5 in a leaf adjacent to
them, 0 elsewhere or without a known location; ``balanced`` (the default) halves
these; ``distributed``: ``1 - members already in the host's leaf / the per-leaf share``
(negative once a leaf holds more than its share). Only for Nova requests in a group or
with network hints, and only with a known topology. A positive multiplier gathers (or
spreads, for distributed) as asked; Invert with a negative multiplier.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.network_options import NetworkDomainOptions, PlansGroups
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class NetworkDomainWeigher(PlansGroups, Weigher[NovaRequest, HostState]):
    """The host's closeness to the group's domain (or spread, for distributed)."""

    name = "weigher_network_domain"
    services = ("nova", "kubernetes")
    Options = NetworkDomainOptions

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """See the module docstring."""
        plan = self.plan
        leaf = plan.leaf_of(host.host) if plan is not None else None
        if plan is None or leaf is None:
            return 0.0
        if plan.strategy == "distributed":
            return max(-1.0, 1.0 - plan.members.get(leaf, 0) / max(1, plan.leaf_cap))
        if leaf in plan.domain:
            value = 1.0
        elif plan.network.leaves[leaf].adjacent & plan.domain:
            value = 0.5
        else:
            value = 0.0
        return value if plan.strategy == "consolidated" else value / 2
