"""weigher_numa_locality: prefer hosts with free CPUs and memory next to the request's GPUs.

Rule: N = the NUMA nodes of the GPUs nova-compute is predicted to claim
(:mod:`cortex.rules.device_choice`). The raw weight is the mean of
``min(1, free CPUs on N / (vCPUs * headroom))`` and ``min(1, free MiB on N / (memory *
headroom))``: free pinnable CPUs for a pinned guest (``pcpuset - pinned_cpus``, as in
Nova's NUMACell), free shared capacity (``len(cpuset) * cpu_allocation_ratio -
cpu_usage``) for others, and memory not used by NUMA guests, all before placement. 1
means the guest's CPUs and memory can sit on its GPUs' nodes; with ``headroom`` 2 it
also means as much again stays free there. Nova's NUMATopologyFilter only asks that it
fit (``numa_policy``); this weigher prefers room to spare, which matters most for
``preferred`` and ``socket`` policies and guests without a NUMA topology. Applies to
requests of passthrough GPUs; hosts without a topology report weigh 0. Invert: a
negative multiplier.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyWeigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.gpu_locality import room_near_claim


@dataclass(frozen=True)
class NumaLocalityOptions:
    """``headroom`` >= 1: the multiple of the guest's size that scores full locality.

    ``packing_host_numa_cells``: Nova's ``[compute] packing_host_numa_cells_allocation_strategy``
    on the computes, for the prediction.
    """

    headroom: float = 1.0
    packing_host_numa_cells: bool = False

    def __post_init__(self) -> None:
        """Reject a headroom below 1."""
        if self.headroom < 1:
            raise ValueError("headroom must be >= 1")


@register
class NumaLocalityWeigher(TopologyWeigher):
    """Free CPUs and memory on the NUMA nodes of the GPUs the request would take (0..1)."""

    name = "weigher_numa_locality"
    Options = NumaLocalityOptions

    def score(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """Mean of the CPU and memory shares the GPUs' nodes can hold; 0 without a report."""
        return room_near_claim(host, request, candidate, self.options.headroom,
                               self.options.packing_host_numa_cells)
