"""filter_server_group_anti_affinity: an ``anti-affinity`` group spreads over hosts.

Nova's ServerGroupAntiAffinityFilter (``nova/scheduler/filters/affinity_filter.py``):
a host passes while it runs fewer group members than the group's
``max_server_per_host`` rule (default 1; the reference implementation always uses 1).
Members on a host are counted as :func:`cortex.rules.measures.group_members_on_host`
says: the host's instances that are members, and at least one when Nova lists the
host in ``instance_group.hosts``. The instance's own host passes (a move may check
it). Not run on rebuild. Invert: ``filter_server_group_affinity``.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.measures import group_members_on_host


@register
class ServerGroupAntiAffinityFilter(Filter[NovaRequest, HostState]):
    """Remove hosts that already run ``max_server_per_host`` members of the group."""

    name = "filter_server_group_anti_affinity"

    def applies(self, request: NovaRequest) -> bool:
        """Only for an ``anti-affinity`` group."""
        return bool(request.server_group and request.server_group.policy == "anti-affinity")

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host is full of group members."""
        if request.instance_uuid and any(i.uuid == request.instance_uuid
                                         for i in host.instances):
            return None
        group = request.server_group
        if group is None:
            return None
        limit = max_server_per_host(group)
        members = group_members_on_host(host, group)
        if members < limit:
            return None
        return (f"anti-affinity group {group.uuid} has {members} member(s) on this host "
                f"(max_server_per_host {limit})")


def max_server_per_host(group) -> int:
    """The group's ``max_server_per_host`` rule (Nova's default 1; unreadable counts as 1)."""
    try:
        return max(1, int(group.rules.get("max_server_per_host", 1)))
    except (TypeError, ValueError):
        return 1
