"""filter_pci_numa_affinity: the PCI devices fit the guest's NUMA cells under ``numa_policy``.

Rule: the PCI part of Nova's NUMATopologyFilter (``numa_fit_instance_to_host`` with
``pci_requests`` and ``pci_stats``): some assignment of the guest's cells to distinct
host cells that fits (:mod:`cortex.rules.numa_fit`) also leaves the PCI requests
satisfiable under each request's NUMA affinity policy (:mod:`cortex.rules.pci_fit`,
Nova's PCI NUMA affinity policy doc): ``required``, ``legacy`` (default),
``preferred``, ``socket``. Only InstancePCIRequests (the spec's ``pci_requests`` or a
``pci_passthrough:alias``) carry a policy; Placement request groups have none. Runs for
guests with NUMA cells and PCI requests; hosts without an agent report pass (option
``unknown_topology: fail``); not on rebuild.
Invert: none; run it in ``shadow`` mode to only record what it would remove.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyFilter, unknown_topology
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import allocation_ratios
from cortex.rules.numa_fit import fit_cells
from cortex.rules.pci_fit import pci_refusal


def affine_requests(request) -> tuple:
    """The PCI requests that have a NUMA affinity policy."""
    return tuple(r for r in request.pci_devices if r.numa_policy)


@register
class PciNumaAffinityFilter(TopologyFilter):
    """Remove hosts where no NUMA placement of the guest has its PCI devices at hand."""

    name = "filter_pci_numa_affinity"

    def applies(self, request: NovaRequest) -> bool:
        """Only for guests with NUMA cells and PCI requests."""
        return bool(request.guest_numa) and bool(affine_requests(request))

    def refusal(self, host: HostState, request: NovaRequest, candidate: Candidate
                ) -> str | None:
        """None if some assignment of guest cells has its devices at hand, else the reason.

        The reason is the last assignment's tried.
        """
        topology = host.topology
        if topology is None or not topology.cells:
            return unknown_topology(self.options)
        wanted = affine_requests(request)
        cpu_ratio, ram_ratio = allocation_ratios(host, candidate)
        _, reason = fit_cells(topology, request.guest_numa, cpu_ratio, ram_ratio,
                              request.emulator_threads_policy == "isolate",
                              accept=lambda cells: pci_refusal(topology, wanted, cells))
        return reason
