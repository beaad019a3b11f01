"""weigher_gpu_cell_preserving: take GPUs from the smallest free cell that holds them.

Rule: HiveD's cell preservation (Zhao et al., OSDI '20): never split a larger free
NVLink cell while a free piece of the requested size exists elsewhere. A free cell is a
largest set of free matching GPUs pairwise joined at ``level`` (default ``nvlink``:
NVLink direct or through NVSwitch) on one host; the weight is k / c for the k GPUs
Nova's PCI tracker is predicted to claim (:mod:`cortex.rules.device_choice`) and the size
c of the largest free cell they come from (:func:`cortex.rules.gpu_locality.claimed_cell_fit`):
1 when the request fills its cell, 0.125 when one GPU breaks a free 8-GPU board, 0 when
the claimed GPUs span cells. With a multiplier above the other GPU weighers' spread, a
whole board stays whole while a smaller free piece of the size asked exists. Hosts
without a topology report weigh 0. Invert (break the largest cells first): a negative
multiplier.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyWeigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.gpu_locality import claimed_cell_fit
from cortex.rules.gpu_sets import LEVELS


@dataclass(frozen=True)
class GpuCellPreservingOptions:
    """``level`` joining a cell's GPUs (a level of :mod:`cortex.rules.gpu_sets`).

    ``packing_host_numa_cells``: Nova's ``[compute] packing_host_numa_cells_allocation_strategy``
    on the computes, for the prediction.
    """

    level: str = "nvlink"
    packing_host_numa_cells: bool = False

    def __post_init__(self) -> None:
        """Validate the level (``same_gpu`` would make every GPU its own cell)."""
        if self.level not in LEVELS[1:]:
            raise ValueError(f"level must be one of {', '.join(LEVELS[1:])}")


@register
class GpuCellPreservingWeigher(TopologyWeigher):
    """k / size of the free cell the request's k GPUs come from (0..1)."""

    name = "weigher_gpu_cell_preserving"
    services = ("nova",)
    Options = GpuCellPreservingOptions

    def score(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """How tightly the claimed GPUs fill their free cell."""
        options = self.options
        return claimed_cell_fit(host, request, candidate, options.level,
                                options.packing_host_numa_cells)
