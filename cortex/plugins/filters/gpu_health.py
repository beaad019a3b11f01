"""filter_gpu_health: the device demand can be served by healthy GPUs alone.

Rule: as filter_gpu_capacity, counting only GPUs the agent (or DCGM) reports healthy:
no retired pages or row remapping pending, no row remapping failure, no uncorrected
ECC errors, no XID error reported. A host whose free matching devices are enough only
with unhealthy ones fails, naming them. Nova cannot see GPU health; a host that passes
filter_gpu_capacity but fails here would have been chosen by Nova. Hosts without an
agent report pass (option ``unknown_topology: fail``); not on rebuild.
Invert: none; run it in ``shadow`` mode to only record what it would remove.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.filters.gpu_capacity import GpuCapacityFilter
from cortex.plugins.registry import register
from cortex.plugins.topology_options import unknown_topology
from cortex.request import Candidate, NovaRequest
from cortex.rules.pci_fit import device_refusal


@register
class GpuHealthFilter(GpuCapacityFilter):
    """Remove hosts whose healthy free GPUs cannot serve the request."""

    name = "filter_gpu_health"
    services = ("nova", "kubernetes")

    def refusal(self, host: HostState, request: NovaRequest, candidate: Candidate
                ) -> str | None:
        """The first device request only unhealthy GPUs could serve, with their reasons."""
        topology = host.topology
        if topology is None:
            return unknown_topology(self.options)
        sick = [g for g in topology.gpus if not g.healthy]
        if not sick:
            return None
        reason = device_refusal(topology, request, healthy_only=True)
        if reason is None:
            return None
        names = "; ".join(f"{g.pci_address}: {', '.join(g.health_reasons) or 'unhealthy'}"
                          for g in sick[:3])
        return f"{reason} (unhealthy: {names})"
