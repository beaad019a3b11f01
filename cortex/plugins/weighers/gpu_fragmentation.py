"""weigher_gpu_fragmentation: prefer the host where the request strands the fewest free GPUs.

Rule: the fragmentation gradient of Weng et al., "Beware of Fragmentation: Scheduling
GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC '23), with Nova's
device and NUMA rules (:mod:`cortex.rules.fragmentation`). A host's fragmentation F is
the expected free GPU capacity, in GPUs, that cannot serve the next request, its size
drawn from ``request_sizes`` ({GPUs: share}) for passthrough GPUs, ``vgpu_sizes``
({vGPUs: share}) for time-sliced vGPUs and ``mig_sizes`` ({compute slices: share}) for
MIG. A passthrough GPU serves k GPUs when it lies in a set of k free GPUs pairwise joined
at ``min_link`` or better (default ``numa_node``: NVLink/NVSwitch, one PCIe switch or one
NUMA node) spanning no more NUMA nodes than such a guest has cells under Nova's
``legacy`` PCI NUMA policy (``numa_span``); a MIG GPU whose instances are all free counts
as whole with ``mig_repartition``.

Feeding: a GPU serves nobody without CPUs and memory next to it. ``cpus_per_gpu`` and
``memory_mb_per_gpu`` (default 8 CPUs and 32 GiB, a typical GPU flavor's share; ``null``
takes the request's own per GPU asked, which placed fewer Alibaba trace tasks before
the first rejection than the fixed share; 0 turns a limit off) cap the free GPU
capacity a host can feed: per NUMA node for a guest with a NUMA topology, per host for
the others. Capacity beyond the cap counts as fragment, so a request that eats the CPUs
of a node with free GPUs weighs less.

The workload's own sizes: with ``sizes_from: demand`` the passthrough sizes are the share
of each size among the creates the decision log recorded over the last four weeks
(``KnowledgeView.gpu_request_sizes``), once there are ``min_learned`` of them;
``request_sizes`` until then. Weng et al. measure fragmentation against the workload's
own distribution; on the Alibaba replays it lowers the unallocated GPUs on ``default``
and costs admissions on ``multigpu50`` (docs/scheduler/placement-quality.md), so it is not the
default.

GPUs shared any way (Weng et al.'s own setting, which Nova cannot run; only the
simulator's ``gpu_sharing: any`` boards mark GPUs ``shareable``): with
``vgpu_request_share`` set (the share of GPU requests that ask vGPUs), F on such hosts is
measured over both kinds at once, so a vGPU that lands on an idle GPU counts the whole
GPU it takes from passthrough requests, and free vGPU room counts as fragment for them.
Unset (the default), each kind is measured apart.

The raw weight is ``-(F after - F before) / (GPUs asked * scale)``, with the GPUs, vGPU
parent or MIG instances and CPUs taken being those nova-compute is predicted to claim
(:mod:`cortex.rules.device_choice`): negative when the request breaks capacity that
could serve bigger requests (a fully free 8-GPU NVSwitch host for a 1-GPU request, an
NVLink pair, a whole NUMA node or MIG GPU), positive when it consumes capacity that was a
fragment anyway. Nova's PCIWeigher only stacks by the count of free devices. Hosts
without a topology report, or whose claim cannot be predicted, weigh 0. With static MIG
partitions (``mig_repartition: false``) every host loses the same, so the weigher does
not separate them: the partitioning, not the placement, fragments such GPUs. Invert: a
negative multiplier spreads instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyWeigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.fragmentation import FragmentationModel, parse_sizes
from cortex.rules.gpu_sets import LEVELS

#: Where the passthrough request sizes come from: the options or the recorded demand.
SIZES_FROM = ("options", "demand")
#: The inventories the fragmentation of a host reads (fragmentation.host_room, vgpu_slots).
_READ = frozenset({"PCPU", "VCPU", "MEMORY_MB", "VGPU"})


@dataclass(frozen=True)
class GpuFragmentationOptions:
    """Request size shares per device kind, the pair level and NUMA span, feeding, ``scale``.

    ``cpus_per_gpu``/``memory_mb_per_gpu``: None takes the request's own per GPU, 0 turns
    the limit off. ``packing_host_numa_cells``: Nova's ``[compute]
    packing_host_numa_cells_allocation_strategy`` on the computes, for the prediction.
    ``sizes_from``: ``options`` (``request_sizes``) or ``demand`` (the recorded creates'
    sizes, :data:`SIZES_FROM`) once ``min_learned`` creates are recorded.
    ``vgpu_request_share`` (0 to 1, None: unset): the share of GPU requests asking vGPUs,
    for measuring ``shareable`` GPUs over both kinds at once.
    """

    request_sizes: dict[str, float] = field(
        default_factory=lambda: {"1": 0.4, "2": 0.2, "4": 0.2, "8": 0.2})
    vgpu_sizes: dict[str, float] = field(
        default_factory=lambda: {"1": 0.5, "2": 0.3, "4": 0.2})
    mig_sizes: dict[str, float] = field(
        default_factory=lambda: {"1": 0.4, "2": 0.2, "3": 0.2, "4": 0.1, "7": 0.1})
    mig_repartition: bool = True
    min_link: str = "numa_node"
    numa_span: bool = True
    cpus_per_gpu: float | None = 8.0
    memory_mb_per_gpu: float | None = 32768.0
    scale: float = 1.0
    packing_host_numa_cells: bool = False
    sizes_from: str = "options"
    min_learned: int = 100
    vgpu_request_share: float | None = None

    def __post_init__(self) -> None:
        """Sizes are positive counts with shares >= 0 (not all 0); a known level; scale > 0."""
        for name in ("request_sizes", "vgpu_sizes", "mig_sizes"):
            parse_sizes(getattr(self, name), name)
        if self.min_link not in LEVELS:
            raise ValueError(f"min_link must be one of {', '.join(LEVELS)}")
        if self.sizes_from not in SIZES_FROM:
            raise ValueError(f"sizes_from must be one of {', '.join(SIZES_FROM)}")
        if self.vgpu_request_share is not None and not 0 <= self.vgpu_request_share <= 1:
            raise ValueError("vgpu_request_share must be between 0 and 1")
        if self.min_learned < 1:
            raise ValueError("min_learned must be at least 1")
        if self.scale <= 0 or (self.cpus_per_gpu or 0) < 0 or (self.memory_mb_per_gpu or 0) < 0:
            raise ValueError("scale must be > 0, cpus_per_gpu and memory_mb_per_gpu >= 0")

    def model(self) -> FragmentationModel:
        """The fragmentation model these options describe."""
        return FragmentationModel(
            parse_sizes(self.request_sizes, "request_sizes"),
            parse_sizes(self.vgpu_sizes, "vgpu_sizes"), parse_sizes(self.mig_sizes, "mig_sizes"),
            self.mig_repartition, self.min_link, self.numa_span, self.cpus_per_gpu,
            self.memory_mb_per_gpu, self.packing_host_numa_cells, self.vgpu_request_share)


@register
class GpuFragmentationWeigher(TopologyWeigher):
    """Minus the fragmentation the request adds to the host, per GPU asked."""

    name = "weigher_gpu_fragmentation"
    Options = GpuFragmentationOptions

    learned: tuple = ()

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self.model = self.options.model()

    def bind(self, request: NovaRequest, view: KnowledgeView) -> GpuFragmentationWeigher:
        """This weigher, or with ``sizes_from: demand`` one measuring the view's sizes.

        The learned model is built once per view; its sizes join what the answers are
        shared under, so answers of two distributions never mix.
        """
        if self.options.sizes_from != "demand":
            return self
        counts = view.root.gpu_request_sizes
        if sum(counts.values()) < self.options.min_learned:
            return self
        return view.root.derived(("fragmentation-sizes", self.memo_identity),
                                 lambda _: self._learned(counts))

    def _learned(self, counts: Mapping[int, int]) -> GpuFragmentationWeigher:
        """A weigher whose passthrough sizes are ``counts``' shares."""
        bound = GpuFragmentationWeigher(self.options)
        bound.model = replace(self.model, sizes=parse_sizes(
            {str(k): float(v) for k, v in counts.items()}, "gpu_request_sizes"))
        bound.learned = bound.model.sizes
        return bound

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests of passthrough GPUs or vGPUs (MIG included)."""
        return request.gpu_count > 0 or bool(request.vgpu_devices)

    def shared_under(self, host: HostState, request: NovaRequest, candidate: Candidate
                     ) -> tuple:
        """What else of the host :meth:`score` reads: the learned sizes, and more.

        For vGPUs, for guests without NUMA cells and with ``vgpu_request_share`` set,
        also the named node's CPU, memory and VGPU inventories (their feed, the vGPUs
        per GPU).
        """
        if not (request.gpu_count and request.guest_numa) or self.model.vgpu_share is not None:
            return (self.learned, tuple(n.node for n in host.nodes_named(candidate.nodes)),
                    tuple((n.node, rc, inventory) for n in host.all_nodes
                          for rc, inventory in n.inventories.items() if rc in _READ))
        return (self.learned,)

    def score(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-(F after - F before) / (GPUs asked * scale)``; 0 without a report or claim."""
        change = self.model.change(host, request, candidate)
        if change is None:
            return 0.0
        before, after, asked = change
        return -(after - before) / (asked * self.options.scale)
