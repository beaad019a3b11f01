"""filter_server_group_affinity: an ``affinity`` group's instances share one host.

Nova's ServerGroupAffinityFilter (``nova/scheduler/filters/affinity_filter.py``): when
the request's server group has the ``affinity`` policy and the group already has
hosts (``instance_group.hosts``, which Nova fills with its members' hosts and with
each host chosen earlier in a multi-create), only those hosts pass; a group without
hosts yet lets every host pass. Names compare case-insensitively. Not run on
rebuild. Invert: ``filter_server_group_anti_affinity``.
"""

from __future__ import annotations

from cortex.plugins.base import Filter
from cortex.plugins.registry import register


@register
class ServerGroupAffinityFilter(Filter):
    """Keep only the hosts of an affinity group's members."""

    name = "filter_server_group_affinity"

    def applies(self, request) -> bool:
        """Only for an ``affinity`` group that already has hosts."""
        group = request.server_group
        return bool(group and group.policy == "affinity" and group.hosts)

    def check(self, host, request, candidate) -> str | None:
        """Reason when the host runs no member of the group."""
        if host.host.lower() in {h.lower() for h in request.server_group.hosts}:
            return None
        return f"affinity group {request.server_group.uuid} has no member on this host"
