"""filter_numa_topology: the guest's NUMA cells fit the host's, as Nova's NUMATopologyFilter.

Rule (``nova/scheduler/filters/numa_topology_filter.py`` and ``nova/virt/hardware.py
numa_fit_instance_to_host``, see :mod:`cortex.rules.numa_fit`): each guest cell on a
distinct host cell; pinned CPUs from the cell's free dedicated CPUs, never overcommitted;
shared vCPUs within ``cpu_allocation_ratio`` and memory within ``ram_allocation_ratio``
(the node's VCPU and MEMORY_MB inventories); huge pages exact; ``hw:cpu_thread_policy``
``require`` needs SMT, ``isolate`` whole cores. The guest cells are the spec's
``numa_topology``, else derived from the flavor as Nova derives them. The PCI part of
Nova's filter is ``filter_pci_numa_affinity``. Hosts without an agent report pass
(option ``unknown_topology: fail`` removes them). Runs for guests with a NUMA topology
(or ``require`` with pinning); not on rebuild, where the instance's own usage is
already counted.
Invert: none; run it in ``shadow`` mode to only record what it would remove.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyFilter, unknown_topology
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import allocation_ratios
from cortex.rules.numa_fit import fit_cells


def wants_smt(request) -> bool:
    """Nova's ``_satisfies_cpu_policy``: dedicated CPUs with thread policy ``require``."""
    specs, image = request.flavor.extra_specs, request.image_properties
    return "dedicated" in (specs.get("hw:cpu_policy"), image.get("hw_cpu_policy")) and \
        "require" in (specs.get("hw:cpu_thread_policy"), image.get("hw_cpu_thread_policy"))


@register
class NumaTopologyFilter(TopologyFilter):
    """Remove hosts whose NUMA cells cannot hold the guest's."""

    name = "filter_numa_topology"

    def applies(self, request: NovaRequest) -> bool:
        """Only for guests with NUMA cells (or asking for SMT siblings)."""
        return bool(request.guest_numa) or wants_smt(request)

    def refusal(self, host: HostState, request: NovaRequest, candidate: Candidate
                ) -> str | None:
        """None if the host passes, else why no assignment of guest to host cells fits."""
        topology = host.topology
        if topology is None or not topology.cells:
            return unknown_topology(self.options)
        if wants_smt(request) and not topology.has_threads:
            return "hw:cpu_thread_policy=require but the host has no SMT siblings"
        if not request.guest_numa:
            return None
        cpu_ratio, ram_ratio = allocation_ratios(host, candidate)
        _, reason = fit_cells(topology, request.guest_numa, cpu_ratio, ram_ratio,
                              request.emulator_threads_policy == "isolate")
        return reason
