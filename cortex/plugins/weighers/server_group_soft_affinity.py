"""weigher_server_group_soft_affinity: prefer hosts running members of a soft-affinity group.

Nova's ServerGroupSoftAffinityWeigher (``nova/scheduler/weights/affinity.py``): for a
request in a ``soft-affinity`` server group, the raw weight is the number of group
members on the host (counted as :func:`cortex.rules.measures.group_members_on_host`
does); other requests are not weighed. A positive multiplier gathers the group (Nova's
default ``soft_affinity_weight_multiplier = 1.0``); a negative one scatters it.
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
class ServerGroupSoftAffinityWeigher(Weigher[NovaRequest, HostState]):
    """Members of the request's soft-affinity group on the host."""

    name = "weigher_server_group_soft_affinity"

    def applies(self, request: NovaRequest) -> bool:
        """Only for a ``soft-affinity`` group."""
        return bool(request.server_group and request.server_group.policy == "soft-affinity")

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """The member count."""
        return float(group_members_on_host(host, request.server_group))
