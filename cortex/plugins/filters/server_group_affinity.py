"""filter_server_group_affinity: an ``affinity`` group's instances share one host.

Nova's ServerGroupAffinityFilter (``nova/scheduler/filters/affinity_filter.py``): when
the request's server group has the ``affinity`` policy and the group already has
hosts (``instance_group.hosts``, which Nova fills with its members' hosts and with
each host chosen earlier in a multi-create), only those hosts pass; a group without
hosts yet lets every host pass. Names compare case-insensitively. Not run on
rebuild. Invert: ``filter_server_group_anti_affinity``.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)


@register
class ServerGroupAffinityFilter(Filter[NovaRequest, HostState]):
    """Keep only the hosts of an affinity group's members."""

    name = "filter_server_group_affinity"

    def applies(self, request: NovaRequest) -> bool:
        """Only for an ``affinity`` group that already has hosts."""
        group = request.server_group
        return bool(group and group.policy == "affinity" and group.hosts)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host runs no member of the group."""
        group = request.server_group
        if group is None or host.host.lower() in {h.lower() for h in group.hosts}:
            return None
        return f"affinity group {group.uuid} has no member on this host"
