"""filter_gpu_capacity: enough free devices of the kinds the request asks for.

Rule: Nova's PciPassthroughFilter (``nova/scheduler/filters/pci_passthrough_filter.py``,
``PciDeviceStats.support_requests`` without NUMA cells: requests applied one after the
other on the free devices, matched by vendor/product/device type), extended to every
device demand of the request (:mod:`cortex.request.devices`): passthrough GPUs,
``PGPU``, ``CUSTOM_PCI_<VENDOR>_<PRODUCT>`` resource classes, and ``VGPU`` backed by
free MIG instances of the profile its trait names. A GPU in MIG mode or under the vGPU
host driver is not a passthrough device. Free = not in use by Placement's account, else
the agent's, else the fleet file's. Hosts without an agent report pass (option
``unknown_topology: fail``); so do hosts whose report holds no MIG or vGPU data for a
``VGPU`` request (Placement already gave them as VGPU allocation candidates; the option
removes them too). Runs when the request asks for devices Cortex can resolve;
not on rebuild.
Invert: none; run it in ``shadow`` mode to only record what it would remove.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyFilter, unknown_topology
from cortex.request import Candidate, NovaRequest
from cortex.rules.pci_fit import device_refusal, knows_vgpus


@register
class GpuCapacityFilter(TopologyFilter):
    """Remove hosts without enough free matching GPUs, PCI devices or vGPUs."""

    name = "filter_gpu_capacity"

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests with a device demand."""
        return bool(request.device_requests)

    def refusal(self, host: HostState, request: NovaRequest, candidate: Candidate
                ) -> str | None:
        """None if the host passes, else the first device request its free devices cannot serve."""
        topology = host.topology
        if topology is None:
            return unknown_topology(self.options)
        if request.vgpu_devices and not knows_vgpus(topology) and unknown_topology(
                self.options):
            return "VGPU requested: no MIG or vGPU data from cortex-agent"
        return device_refusal(topology, request)
