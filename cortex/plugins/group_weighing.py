"""The soft server-group weighers' common rule: the group's members on the host, signed.

Nova's ServerGroupSoftAffinityWeigher and ServerGroupSoftAntiAffinityWeigher
(``nova/scheduler/weights/affinity.py``) weigh the same count, the members of the
request's server group on the host (:func:`cortex.rules.measures.group_members_on_host`),
for a group of their policy only: affinity seeks it, anti-affinity avoids it.
"""

from __future__ import annotations

from typing import ClassVar

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import group_members_on_host


class SoftGroupWeigher(Weigher[NovaRequest, HostState]):
    """``sign`` times the members of the request's group on the host: set ``policy``, ``sign``.

    Applies only to a request whose server group has the policy ``policy``
    (``soft-affinity``, ``soft-anti-affinity``); ``sign`` is 1.0 (more members weigh
    more) or -1.0 (fewer members weigh more).
    """

    policy: ClassVar[str] = ""
    sign: ClassVar[float] = 1.0

    def applies(self, request: NovaRequest) -> bool:
        """Only for a server group of this weigher's ``policy``."""
        return bool(request.server_group and request.server_group.policy == self.policy)

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``sign`` times the member count."""
        return self.sign * float(group_members_on_host(host, request.server_group))
