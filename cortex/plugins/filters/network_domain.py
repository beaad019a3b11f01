"""filter_network_domain: keep a group's instances in the network domain chosen for it.

The placement rules for groups (the reference topology-aware scheduler's domain
rules; see :mod:`cortex.rules.network_domains`): for a ``consolidated`` (or
``balanced``) group the domain of adjacent leaves the rule and score choose, for a
``distributed`` one at most ``ceil(size / leaves)`` members per leaf. The domain is a
hard constraint only for ``latency_sensitive`` requests or with ``hard: true``; then
hosts outside it, or without a known network location, fail. A ``network_bandwidth``
hint always removes hosts whose leaf uplink (else spine uplink) is below it or
unknown. Without any network topology every host passes. Runs for Nova requests with
group or network hints only; not on rebuild. Invert: none; leave ``hard`` false
and use ``weigher_network_domain`` for a soft preference.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.network_options import NetworkDomainOptions, PlansGroups
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class NetworkDomainFilter(PlansGroups, Filter[NovaRequest, HostState]):
    """Remove hosts outside the group's network domain (when hard) or below the bandwidth."""

    name = "filter_network_domain"
    services = ("nova", "kubernetes")
    Options = NetworkDomainOptions

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host's leaf misses the bandwidth or, if hard, the domain."""
        plan = self.plan
        if plan is None:
            return None
        location = plan.leaf_of(host.host)
        if request.network.min_uplink_gbps and location not in plan.eligible:
            return (f"leaf {location or '(unknown)'} uplink below "
                    f"{request.network.min_uplink_gbps:g} Gbit/s or unknown")
        if not plan.hard:
            return None
        if location is None:
            return "no network location known"
        if plan.strategy == "distributed":
            held = plan.members.get(location, 0)
            if held >= plan.leaf_cap:
                return f"leaf {location} holds {held} of the group (at most {plan.leaf_cap})"
            return None
        if location not in plan.domain:
            return (f"leaf {location} outside the group's domain "
                    f"{'+'.join(sorted(plan.domain)) or '(none)'}")
        return None
