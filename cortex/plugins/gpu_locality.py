"""What the GPU weighers share: GPUs asked for, the GPUs that may serve them, CPU locality.

The NUMA rules are Nova's (``nova/virt/hardware.py numa_fit_instance_to_host`` and the
PCI NUMA affinity policies, see :mod:`cortex.plugins.pci_fit`); the GPU sets are
:mod:`cortex.plugins.gpu_sets`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cortex.knowledge.topology import HostTopology
from cortex.plugins.gpu_sets import GpuMap
from cortex.plugins.numa_fit import PINNED, fit_cells
from cortex.plugins.pci_fit import matches
from cortex.plugins.topology import pci_requests

# Policies that bind the devices to the guest's cells, strictest first.
_BINDING = ("required", "legacy", "socket")


def gpu_count(request: Any) -> int:
    """Passthrough devices (GPUs) the request asks for, over all its PCI requests."""
    return sum(r.count for r in pci_requests(request))


def candidate_mask(topology: HostTopology, gpus: GpuMap, request: Any) -> int:
    """Free GPUs matching a spec of one of the request's PCI requests, as a GpuMap mask."""
    wanted = pci_requests(request)
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
    policies = {r.numa_policy for r in pci_requests(request)}
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
