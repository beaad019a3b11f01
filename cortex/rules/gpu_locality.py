"""GPU locality: which GPUs may serve a request, how well connected, how near its CPUs.

The NUMA rules are Nova's (``nova/virt/hardware.py numa_fit_instance_to_host`` and the
PCI NUMA affinity policies, see :mod:`cortex.rules.pci_fit`); the GPU sets are
:mod:`cortex.rules.gpu_sets`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cortex.knowledge.topology import HostTopology
from cortex.rules.device_choice import CLAIMS, Claim
from cortex.rules.gpu_sets import GpuMap, gpu_map
from cortex.rules.measures import allocation_ratios
from cortex.rules.numa_fit import PINNED, fit_cells
from cortex.rules.pci_fit import matches

# Policies that bind the devices to the guest's cells, strictest first.
_BINDING = ("required", "legacy", "socket")


def candidate_mask(topology: HostTopology, gpus: GpuMap, request: Any) -> int:
    """Free GPUs matching a spec of one of the request's PCI requests, as a GpuMap mask."""
    wanted = request.pci_devices
    addresses = [a for pool in topology.device_pools
                 if any(matches(pool, r.specs) for r in wanted) for a in pool.addresses]
    return gpus.mask(addresses)


def fitting_assignments(topology: HostTopology, request: Any, ratios: tuple[float, float]
                        ) -> list[tuple[int, ...]]:
    """Every assignment of the guest's cells to host cells that fits CPUs and memory."""
    found: list[tuple[int, ...]] = []

    def collect(ids: tuple[int, ...]) -> str:
        found.append(ids)
        return "collected"

    fit_cells(topology, request.guest_numa, ratios[0], ratios[1],
              request.emulator_threads_policy == "isolate", accept=collect)
    return found


def allowed_node_sets(topology: HostTopology, request: Any, ratios: tuple[float, float]
                      ) -> tuple[frozenset[int | None], ...] | None:
    """NUMA nodes a GPU set may span under the request's PCI NUMA policy; None: any.

    Per fitting assignment of the guest's cells: ``required`` its host cells, ``legacy``
    those and GPUs of unknown node, ``socket`` every cell of the sockets it uses;
    ``preferred``, no policy or no guest NUMA topology constrain nothing.
    """
    if not request.guest_numa:
        return None
    policies = {r.numa_policy for r in request.pci_devices}
    policy = next((p for p in _BINDING if p in policies), None)
    if policy is None:
        return None
    sockets = {c.id: c.socket for c in topology.cells}
    sets = set()
    for ids in fitting_assignments(topology, request, ratios):
        nodes: set[int | None] = set(ids)
        if policy == "legacy":
            nodes.add(None)
        elif policy == "socket":
            used = {sockets[i] for i in ids}
            nodes = {c.id for c in topology.cells if c.socket in used and c.socket is not None}
        sets.add(frozenset(nodes))
    return tuple(sorted(sets, key=lambda s: sorted(map(str, s))))


def free_cpus(topology: HostTopology, nodes: Iterable[int | None], pinned: bool,
              cpu_ratio: float) -> float:
    """Free pinnable CPUs (pinned guests) or free shared vCPU capacity on host cells ``nodes``."""
    total = 0.0
    for cell in topology.cells:
        if cell.id in nodes:
            total += cell.avail_pcpus if pinned else max(
                0.0, len(cell.cpuset) * cpu_ratio - cell.cpu_usage)
    return total


def free_memory(topology: HostTopology, nodes: Iterable[int | None]) -> int:
    """MiB not used by guests on host cells ``nodes``."""
    return sum(c.avail_memory for c in topology.cells if c.id in nodes)


def is_pinned(request: Any) -> bool:
    """Whether the guest's CPUs are (partly) dedicated."""
    return any(c.cpu_policy in PINNED for c in request.guest_numa) or \
        request.cpu_policy in PINNED


def single_gpu_locality(topology: HostTopology, gpus: GpuMap, address: str,
                        cells: Sequence[int] | None, request: Any,
                        ratios: tuple[float, float], scores: Mapping[str, float]) -> float:
    """How local one GPU is to the guest's CPUs (0..1).

    ``cells``: the guest's host cells when known. A guest with a NUMA topology: 1 when
    its cells (or, unknown, some fitting assignment) include the GPU's node, else the
    score of the level between the node and the nearest guest cell. A guest without
    one: the share of its vCPUs the GPU's node has free CPUs for.
    """
    node = gpus.nodes[gpus.index[address]]
    vcpus = max(1, request.flavor.vcpus)
    if not request.guest_numa:
        return min(1.0, free_cpus(topology, (node,), False, ratios[0]) / vcpus)
    options = [tuple(cells)] if cells is not None else fitting_assignments(topology, request,
                                                                           ratios)
    if any(node in ids for ids in options):
        return 1.0
    sockets = {c.id: c.socket for c in topology.cells}
    same_socket = node is not None and any(
        sockets.get(node) is not None and sockets.get(node) == sockets.get(i)
        for ids in options for i in ids)
    return scores["cross_numa"] if same_socket else scores["cross_socket"]


def predicted_claim(host: Any, request: Any, candidate: Any, pack: bool = False
                    ) -> Claim | None:
    """The claim nova-compute is predicted to make on ``host``'s named node.

    :func:`cortex.rules.device_choice.predict_claim` with the node's allocation ratios,
    kept per topology and request shape (:data:`cortex.rules.device_choice.CLAIMS`);
    ``pack``: Nova's ``packing_host_numa_cells_allocation_strategy``. None when the
    host reports no GPUs or cannot serve the request.
    """
    topology = host.topology
    if topology is None or not topology.gpus:
        return None
    return CLAIMS.get(topology, request, allocation_ratios(host, candidate), pack)


def claimed_set_quality(host: Any, request: Any, candidate: Any,
                        scores: Mapping[str, float], how: str, pack: bool = False) -> float:
    """Quality (0..1) of the GPU set nova-compute is predicted to hand the request.

    A set scores its weakest pair (``how`` ``mean``: the mean over pairs) by ``scores``
    per level (:mod:`cortex.rules.gpu_sets`); one GPU its locality to the guest's CPUs
    (:func:`single_gpu_locality`). 0 when no claim is predicted.
    """
    claim = predicted_claim(host, request, candidate, pack)
    if claim is None:
        return 0.0
    topology, ratios = host.topology, allocation_ratios(host, candidate)
    gpus = gpu_map(topology)
    if len(claim.devices) == 1:
        return single_gpu_locality(topology, gpus, claim.devices[0], claim.cells, request,
                                   ratios, scores)
    return gpus.quality(gpus.mask(claim.devices), scores, how)


def best_set_quality(host: Any, request: Any, candidate: Any, scores: Mapping[str, float],
                     how: str) -> float:
    """Quality (0..1) of the best free GPU set the request's NUMA policy allows on ``host``.

    Over the free matching GPUs on host cells some fitting assignment of the guest's
    cells allows (:func:`allowed_node_sets`); one GPU scores its locality to the guest's
    CPUs. 0 without a topology report.
    """
    topology = host.topology
    if topology is None or not topology.gpus:
        return 0.0
    ratios = allocation_ratios(host, candidate)
    gpus = gpu_map(topology)
    free = candidate_mask(topology, gpus, request)
    node_sets = allowed_node_sets(topology, request, ratios)
    k = request.gpu_count
    if k == 1:
        allowed = [i for i in gpus.members(free)
                   if node_sets is None or any(gpus.nodes[i] in s for s in node_sets)]
        return max((single_gpu_locality(topology, gpus, gpus.addresses[i], None, request,
                                        ratios, scores) for i in allowed), default=0.0)
    best = gpus.best_set(free, k, scores, how, node_sets)
    return best[0] if best is not None else 0.0


def room_near_claim(host: Any, request: Any, candidate: Any, headroom: float = 1.0,
                    pack: bool = False) -> float:
    """How much of the guest's CPUs and memory the claimed GPUs' NUMA nodes hold (0..1).

    The mean of ``min(1, free CPUs / (vCPUs * headroom))`` and ``min(1, free MiB /
    (memory * headroom))`` on the nodes of the predicted claim's GPUs: free pinnable CPUs
    for a pinned guest, free shared capacity at the allocation ratio otherwise (Nova's
    NUMACell accounting), before placement. 0 when no claim is predicted.
    """
    claim = predicted_claim(host, request, candidate, pack)
    if claim is None:
        return 0.0
    topology, ratios = host.topology, allocation_ratios(host, candidate)
    gpus = gpu_map(topology)
    nodes = {gpus.nodes[gpus.index[a]] for a in claim.devices}
    cpus = free_cpus(topology, nodes, is_pinned(request), ratios[0])
    memory = free_memory(topology, nodes)
    cpu_share = min(1.0, cpus / (max(1, request.flavor.vcpus) * headroom))
    memory_share = min(1.0, memory / (max(1, request.flavor.memory_mb) * headroom))
    return (cpu_share + memory_share) / 2


def claimed_cell_fit(host: Any, request: Any, candidate: Any, level: str = "nvlink",
                     pack: bool = False) -> float:
    """How tightly the GPU set nova-compute is predicted to claim fills its free cell (0..1).

    HiveD's buddy cells (Zhao et al., "HiveD: Sharing a GPU Cluster for Deep Learning
    with Guarantees", OSDI '20), on the agent's link map: a *free cell* is a largest set
    of free GPUs matching the request, pairwise joined at ``level`` or better
    (:meth:`cortex.rules.gpu_sets.GpuMap.clique_sizes`). The claim of k GPUs takes
    from the largest free cell any of its GPUs lies in, of size c >= k; the answer is
    k / c: 1 when it fills that cell exactly, 1/8 when one GPU splits a free 8-GPU
    NVSwitch board. Weighed across hosts, the best answer is the host with the
    smallest free cell that holds the request: a larger cell is split only when no
    smaller piece is free anywhere. 0 when no claim is predicted, and when the claimed
    GPUs are not pairwise joined at ``level`` (the set spans cells; HiveD would serve
    it from a coarser level, which ``weigher_gpu_affinity`` ranks).
    """
    claim = predicted_claim(host, request, candidate, pack)
    if claim is None or not claim.devices:
        return 0.0
    topology = host.topology
    gpus = gpu_map(topology)
    free = candidate_mask(topology, gpus, request) | gpus.mask(claim.devices)
    claimed = gpus.mask(claim.devices)
    if not gpus.all_linked(claimed, level):
        return 0.0
    sizes = gpus.clique_sizes(free, level)
    cell = max((sizes[i] for i in gpus.members(claimed)), default=0)
    return len(claim.devices) / max(cell, len(claim.devices))
