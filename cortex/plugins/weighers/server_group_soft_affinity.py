"""weigher_server_group_soft_affinity: prefer hosts running members of a soft-affinity group.

Nova's ServerGroupSoftAffinityWeigher (``nova/scheduler/weights/affinity.py``): for a
request in a ``soft-affinity`` server group, the raw weight is the number of group
members on the host (counted as :func:`cortex.rules.measures.group_members_on_host`
does); other requests are not weighed. A positive multiplier gathers the group (Nova's
default ``soft_affinity_weight_multiplier = 1.0``); a negative one scatters it.
"""

from __future__ import annotations

from cortex.plugins.group_weighing import SoftGroupWeigher
from cortex.plugins.registry import register


@register
class ServerGroupSoftAffinityWeigher(SoftGroupWeigher):
    """Members of the request's soft-affinity group on the host."""

    name = "weigher_server_group_soft_affinity"
    policy = "soft-affinity"
