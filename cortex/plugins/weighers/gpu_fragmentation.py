"""weigher_gpu_fragmentation: prefer the host where the request leaves the free GPUs most useful.

Rule: the usefulness U of a host's free GPUs is the expected number of them that can
serve a request whose size is drawn from ``request_sizes`` ({GPUs: share}). A free GPU
serves a request of k GPUs when it lies in a set of k free GPUs pairwise joined at
``min_link`` or better (default ``numa_node``: NVLink/NVSwitch, one PCIe switch or one
NUMA node), spanning no more NUMA nodes than a guest of k GPUs has cells under Nova's
default ``legacy`` PCI NUMA policy (``numa_span``), and - with ``cpus_per_gpu`` /
``memory_mb_per_gpu`` - on a node with the free pinnable CPUs and memory to feed it
(:meth:`cortex.plugins.gpu_sets.GpuMap.usefulness`). The raw weight is ``-(U before -
U after) / (k * scale)``, the loss per requested GPU, the GPUs (and CPUs) taken being
those nova-compute is predicted to claim (:mod:`cortex.plugins.device_choice`). So a
1-GPU request goes to a half-used 8-GPU NVSwitch host, not a fully free one, and takes
a GPU that completes no NVLink pair or NUMA node rather than breaking one. For vGPU
requests (time-sliced vGPU hosts) U counts free vGPU capacity, in GPUs, on GPUs with
room for a request drawn from ``vgpu_sizes`` ({vGPUs: share}), and the loss is per GPU
asked for. This is the fragmentation measure of Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC '23)
used as a weigher; Nova's PCIWeigher only stacks by the count of free devices. Hosts
without a topology report weigh 0. Invert: a negative multiplier spreads instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.plugins.base import Weigher
from cortex.plugins.device_choice import CLAIMS, vgpu_parent, vgpu_slots
from cortex.plugins.gpu_locality import fed_mask, gpu_count, guest_usage
from cortex.plugins.gpu_sets import LEVELS, gpu_map, vgpu_usefulness
from cortex.plugins.registry import register
from cortex.plugins.topology import allocation_ratios, vgpu_requests


def _sizes(table: dict[str, float], name: str) -> tuple[tuple[int, float], ...]:
    """``{"k": share}`` as ``((k, probability), ...)``; ValueError when malformed."""
    if not all(k.isdigit() and int(k) > 0 for k in table):
        raise ValueError(f"{name}: keys are counts (\"1\", \"2\", ...)")
    if any(v < 0 for v in table.values()) or not any(table.values()):
        raise ValueError(f"{name}: shares must be >= 0 and not all 0")
    total = sum(table.values())
    return tuple(sorted((int(k), v / total) for k, v in table.items() if v))


@dataclass(frozen=True)
class GpuFragmentationOptions:
    """Request size shares, the pair level and NUMA span a set needs, feeding, ``scale`` > 0.

    ``packing_host_numa_cells``: Nova's ``[compute] packing_host_numa_cells_allocation_strategy``
    on the computes, for the prediction.
    """

    request_sizes: dict[str, float] = field(
        default_factory=lambda: {"1": 0.4, "2": 0.2, "4": 0.2, "8": 0.2})
    vgpu_sizes: dict[str, float] = field(default_factory=lambda: {"1": 0.5, "2": 0.3,
                                                                    "4": 0.2})
    min_link: str = "numa_node"
    numa_span: bool = True
    cpus_per_gpu: float = 0.0
    memory_mb_per_gpu: float = 0.0
    scale: float = 2.0
    packing_host_numa_cells: bool = False

    def __post_init__(self) -> None:
        """Sizes are positive counts with shares >= 0 (not all 0); a known level; scale > 0."""
        _sizes(self.request_sizes, "request_sizes")
        _sizes(self.vgpu_sizes, "vgpu_sizes")
        if self.min_link not in LEVELS:
            raise ValueError(f"min_link must be one of {', '.join(LEVELS)}")
        if self.scale <= 0 or self.cpus_per_gpu < 0 or self.memory_mb_per_gpu < 0:
            raise ValueError("scale must be > 0, cpus_per_gpu and memory_mb_per_gpu >= 0")


@register
class GpuFragmentationWeigher(Weigher):
    """Minus the usefulness the request's GPUs take from the host, per GPU."""

    name = "weigher_gpu_fragmentation"
    Options = GpuFragmentationOptions

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self.sizes = _sizes(self.options.request_sizes, "request_sizes")
        self.vgpu_sizes = _sizes(self.options.vgpu_sizes, "vgpu_sizes")

    def applies(self, request) -> bool:
        """Only for requests of passthrough GPUs or vGPUs."""
        return gpu_count(request) > 0 or bool(vgpu_requests(request))

    def weigh(self, host, request, candidate) -> float:
        """``-(U before - U after) / (GPUs asked * scale)``; 0 without a report."""
        topology = host.topology
        if topology is None or not topology.gpus:
            return 0.0
        if gpu_count(request) == 0:
            return self._vgpu(host, request)
        options = self.options
        claim = CLAIMS.get(topology, request, allocation_ratios(host, candidate),
                           options.packing_host_numa_cells)
        if claim is None:
            return 0.0
        gpus = gpu_map(topology)
        free = gpus.mask(g.pci_address for g in topology.free_gpus)
        after = free & ~gpus.mask(claim.devices)
        feed = (options.cpus_per_gpu, options.memory_mb_per_gpu)
        before = fed_mask(topology, gpus, free, *feed)
        after = fed_mask(topology, gpus, after, *feed, guest_usage(request, claim.cells))
        level, span = options.min_link, options.numa_span
        loss = gpus.usefulness(before, self.sizes, level, span) - gpus.usefulness(
            after, self.sizes, level, span)
        return -loss / (max(1, len(claim.devices)) * options.scale)

    def _vgpu(self, host, request) -> float:
        """The vGPU case: loss of vGPU capacity able to serve ``vgpu_sizes``, per GPU asked."""
        slots = vgpu_slots(host)
        count = sum(r.count for r in vgpu_requests(request))
        if not slots or not count:
            return 0.0
        free = [slots - g.vgpus_in_use for g in host.topology.gpus
                if g.virtualization_mode == "host_vgpu" and g.mig_mode != "enabled"]
        parent = vgpu_parent(free, count)
        if parent is None:
            return 0.0
        after = list(free)
        after[parent] -= count
        loss = vgpu_usefulness(free, self.vgpu_sizes, slots) - vgpu_usefulness(
            after, self.vgpu_sizes, slots)
        return -loss / (count / slots * self.options.scale)
