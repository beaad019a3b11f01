"""weigher_server_group_soft_anti_affinity: prefer hosts running no member of the group.

Nova's ServerGroupSoftAntiAffinityWeigher (``nova/scheduler/weights/affinity.py``):
for a request in a ``soft-anti-affinity`` server group, the raw weight is minus the
number of group members on the host (counted as
:func:`cortex.rules.measures.group_members_on_host` does); other requests are not
weighed. A positive multiplier scatters the group (Nova's default
``soft_anti_affinity_weight_multiplier = 1.0``); a negative one gathers it.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.measures import group_members_on_host


@register
class ServerGroupSoftAntiAffinityWeigher(Weigher[NovaRequest, HostState]):
    """Minus the members of the request's soft-anti-affinity group on the host."""

    name = "weigher_server_group_soft_anti_affinity"

    def applies(self, request: NovaRequest) -> bool:
        """Only for a ``soft-anti-affinity`` group."""
        return bool(request.server_group
                    and request.server_group.policy == "soft-anti-affinity")

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """Minus the member count."""
        return -float(group_members_on_host(host, request.server_group))
