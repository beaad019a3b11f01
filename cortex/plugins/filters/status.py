"""filter_status: remove hosts whose compute service is disabled or down.

Nova's ComputeFilter (service disabled by an operator, or not heartbeating) plus
the ``COMPUTE_STATUS_DISABLED`` trait that nova-compute puts on a disabled
service's providers (Nova's ``compute_status_filter`` pre-filter). Not run on
rebuild: the instance stays where it is (Nova's ``RUN_ON_REBUILD = False``). Invert:
none; run it in ``shadow`` mode to only record what it would remove.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest

DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"


@register
class StatusFilter(Filter[NovaRequest, HostState]):
    """Remove disabled, down and ``COMPUTE_STATUS_DISABLED`` hosts."""

    name = "filter_status"
    host_only = True

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the service is disabled or down."""
        if not host.enabled:
            reason = f": {host.disabled_reason}" if host.disabled_reason else ""
            return f"compute service disabled{reason}"
        if not host.up:
            return "compute service is down"
        if DISABLED_TRAIT in host.traits:
            return f"host has trait {DISABLED_TRAIT}"
        return None
