"""detector_gpu_island: move the one instance that keeps a whole NVLink cell from being free.

Rule: on a host with passthrough GPUs, a *cell* is a largest set of GPUs pairwise joined
by NVLink (an NVSwitch board's 8, a bridged pair), as the agent's link map says
(:meth:`cortex.rules.gpu_sets.GpuMap.clique_sizes`, HiveD's buddy cells, OSDI '20). An
instance whose GPUs are the only used ones of such a cell is a candidate when moving it
would make at least ``min_cell`` GPUs of whole cells free, more than it holds (an
instance filling its cell is where it belongs): an 8-GPU job can then land there again.
Scored by the GPUs won less the GPUs moved. The descheduler then asks the pipelines for a
target and keeps the move only if the target does not lose as many
whole-cell GPUs as the source wins (``whole_cell_gpus``, :mod:`cortex.rules.gpu_sets`).
Knowing which instance holds a GPU needs the agent's report (the QEMU process
holding the GPU's VFIO group), a fleet file or the simulator. The seed GPU scheduler's
defragmenter compacts scattered allocations the same way; Nova has nothing like it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cortex.knowledge.view import KnowledgeView
from cortex.plugins.base import Detector, MoveCandidate
from cortex.plugins.registry import register
from cortex.rules.gpu_sets import free_gpus, whole_cell_gpus


@dataclass(frozen=True)
class GpuIslandOptions:
    """``min_cell``: whole-cell GPUs a move must free to be worth it (>= 2)."""

    min_cell: int = 4

    def __post_init__(self) -> None:
        if self.min_cell < 2:
            raise ValueError(f"min_cell {self.min_cell} must be at least 2")


@register
class GpuIslandDetector(Detector):
    """Instances whose move frees whole NVLink cells on their host."""

    name = "detector_gpu_island"
    Options = GpuIslandOptions

    def detect(self, view: KnowledgeView, now: Any) -> list[MoveCandidate]:
        """Per host, each single holder of a cell's used GPUs whose move frees enough."""
        found = []
        for name, host in view.hosts.items():
            topology = host.topology
            if topology is None or not (host.enabled and host.up):
                continue
            held: dict[str, list[str]] = {}
            for gpu in topology.gpus:
                if gpu.in_use and gpu.instance_uuid and gpu.passthrough:
                    held.setdefault(gpu.instance_uuid, []).append(gpu.pci_address)
            if not held:
                continue
            free = free_gpus(topology)
            before = whole_cell_gpus(topology, free)
            active = {i.uuid for i in host.instances
                      if i.vm_state in (None, "active") and not i.task_state}
            for instance, gpus in sorted(held.items()):
                if host.instances and instance not in active:
                    continue
                won = whole_cell_gpus(topology, free | set(gpus)) - before
                if won < self.options.min_cell or won <= len(gpus):
                    continue  # too little, or the instance fills the cells it frees
                found.append(MoveCandidate(
                    instance, name, self.name,
                    f"moving its {len(gpus)} GPU(s) frees {won} GPUs of whole NVLink cells "
                    f"on {name}", score=float(won - len(gpus)), gpus=tuple(sorted(gpus)),
                    frees_gpus=won))
        return found
