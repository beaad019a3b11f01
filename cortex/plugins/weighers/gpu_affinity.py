"""weigher_gpu_affinity: prefer hosts where the request's GPUs are best connected.

Rule: for a request of k passthrough GPUs, the quality of the k-set it gets on the host,
from the host's GPU pair matrix (:mod:`cortex.rules.gpu_sets`): each pair scores by
what joins it (``pair_scores``; default same GPU 1.0, NVLink direct or through NVSwitch
0.9, same PCIe switch 0.7, same NUMA node 0.5, across NUMA nodes 0.2, across sockets
0.1) and a set scores its weakest pair (``set_quality: mean`` averages the pairs).
``devices: predicted`` (default) scores the set nova-compute is predicted to claim
(:mod:`cortex.rules.device_choice`: Cortex picks the host, Nova's PCI tracker picks
the devices); ``best`` scores the best free k-set that the request's PCI NUMA policy
allows on some host cells the guest fits (Nova's NUMATopologyFilter and
``numa_policy`` rules). For k = 1 it scores the GPU's locality to the guest's CPUs
instead: 1 when the guest's cells include the GPU's NUMA node (or, for a guest without
NUMA topology, the node has free CPUs for all its vCPUs), else the score of the level
between them. Hosts without a topology report weigh 0. The reference implementation's
GPU topology weighing, with the pair scores configurable. Invert: a negative multiplier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.topology_options import TopologyWeigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.gpu_locality import best_set_quality, claimed_set_quality
from cortex.rules.gpu_sets import DEFAULT_PAIR_SCORES, SET_QUALITY, check_pair_scores

DEVICE_MODES = ("predicted", "best")


@dataclass(frozen=True)
class GpuAffinityOptions:
    """``pair_scores`` per level, ``set_quality`` weakest|mean, ``devices`` predicted|best.

    ``packing_host_numa_cells``: Nova's ``[compute] packing_host_numa_cells_allocation_strategy``
    on the computes, for the prediction.
    """

    pair_scores: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PAIR_SCORES))
    set_quality: str = "weakest"
    devices: str = "predicted"
    packing_host_numa_cells: bool = False

    def __post_init__(self) -> None:
        """Validate the levels, scores and modes."""
        check_pair_scores(self.pair_scores)
        if self.set_quality not in SET_QUALITY:
            raise ValueError(f"set_quality must be one of {', '.join(SET_QUALITY)}")
        if self.devices not in DEVICE_MODES:
            raise ValueError(f"devices must be one of {', '.join(DEVICE_MODES)}")


@register
class GpuAffinityWeigher(TopologyWeigher):
    """Quality of the GPU set the request gets on the host (0..1)."""

    name = "weigher_gpu_affinity"
    Options = GpuAffinityOptions

    def score(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """The set's quality; k = 1: the GPU's locality to the guest's CPUs."""
        options = self.options
        scores = {**DEFAULT_PAIR_SCORES, **options.pair_scores}
        if options.devices == "predicted":
            return claimed_set_quality(host, request, candidate, scores, options.set_quality,
                                       options.packing_host_numa_cells)
        return best_set_quality(host, request, candidate, scores, options.set_quality)
