"""weigher_server_group_soft_anti_affinity: prefer hosts running no member of the group.

Nova's ServerGroupSoftAntiAffinityWeigher (``nova/scheduler/weights/affinity.py``):
for a request in a ``soft-anti-affinity`` server group, the raw weight is minus the
number of group members on the host (counted as
:func:`cortex.rules.measures.group_members_on_host` does); other requests are not
weighed. A positive multiplier scatters the group (Nova's default
``soft_anti_affinity_weight_multiplier = 1.0``); a negative one gathers it.
"""

from __future__ import annotations

from cortex.plugins.group_weighing import SoftGroupWeigher
from cortex.plugins.registry import register


@register
class ServerGroupSoftAntiAffinityWeigher(SoftGroupWeigher):
    """Minus the members of the request's soft-anti-affinity group on the host."""

    name = "weigher_server_group_soft_anti_affinity"
    policy = "soft-anti-affinity"
    sign = -1.0
