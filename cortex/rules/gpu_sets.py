"""Sets of GPUs on one host: the pair matrix, set quality and usefulness, cached per topology.

What joins two GPUs, best first (the ``level`` of a pair; NVIDIA's topology levels as
``nvidia-smi topo -m`` and NVML's ``nvmlDeviceGetTopologyCommonAncestor`` report them,
from the agent's :class:`~cortex.knowledge.topology.GpuLink`):

* ``same_gpu`` - the pair is one GPU (two vGPU/MIG slices of it);
* ``nvlink`` - NVLink, direct (bridges) or through NVSwitch (``GpuLink.nvlink > 0``);
* ``pcie_switch`` - the same PCIe switch or board (``INTERNAL``, ``SINGLE``, ``MULTIPLE``);
* ``numa_node`` - the same NUMA node, across host bridges (``HOSTBRIDGE``, ``NODE``);
* ``cross_numa`` - different NUMA nodes of one socket (AMD NPS2/NPS4, Intel SNC);
* ``cross_socket`` - across the sockets' interconnect (``SYSTEM``), or unknown.

A GPU's NUMA node is the agent's ``numa_node`` (else sysfs' ``pci_numa_node``); sockets
come from the host's NUMA cells. A :class:`GpuMap` holds these static facts for one
topology and memoises what depends only on a set of free GPUs (a bit mask), so a
weigher pays the combinatorics once per host state, not once per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from types import MappingProxyType
from typing import Any

from cortex.knowledge.topology import Gpu, GpuLink, HostTopology

LEVELS = ("same_gpu", "nvlink", "pcie_switch", "numa_node", "cross_numa", "cross_socket")
RANK = MappingProxyType({name: rank for rank, name in enumerate(LEVELS)})
DEFAULT_PAIR_SCORES: Mapping[str, float] = MappingProxyType({
    "same_gpu": 1.0, "nvlink": 0.9, "pcie_switch": 0.7, "numa_node": 0.5,
    "cross_numa": 0.2, "cross_socket": 0.1})
SET_QUALITY = ("weakest", "mean")
_SWITCH_LEVELS = frozenset({"INTERNAL", "SINGLE", "MULTIPLE"})
_MEMO_LIMIT = 4096


def check_pair_scores(scores: Mapping[str, float]) -> None:
    """Raise ValueError unless ``scores`` names only known levels with scores in [0, 1]."""
    unknown = sorted(set(scores) - set(LEVELS))
    if unknown:
        raise ValueError(f"pair_scores: unknown level(s) {', '.join(unknown)} "
                         f"(known: {', '.join(LEVELS)})")
    if any(not 0.0 <= v <= 1.0 for v in scores.values()):
        raise ValueError("pair_scores must lie in [0, 1]")


def gpu_node(gpu: Gpu) -> int | None:
    """The GPU's NUMA node: the agent's ``numa_node``, else sysfs' ``pci_numa_node``."""
    return gpu.numa_node if gpu.numa_node is not None else gpu.pci_numa_node


def pair_level(a: Gpu, b: Gpu, link: GpuLink | None, sockets: Mapping[int, int | None]
               ) -> str:
    """The level (:data:`LEVELS`) joining GPUs ``a`` and ``b``; ``sockets`` maps node -> socket."""
    if a.pci_address == b.pci_address:
        return "same_gpu"
    if link is not None and link.nvlink > 0:
        return "nvlink"
    common = (link.topology or "").upper() if link is not None else ""
    if common in _SWITCH_LEVELS:
        return "pcie_switch"
    na, nb = gpu_node(a), gpu_node(b)
    if na is not None and na == nb:
        return "numa_node"
    if na is None or nb is None:
        return "numa_node" if common in ("HOSTBRIDGE", "NODE") else "cross_socket"
    sa, sb = sockets.get(na), sockets.get(nb)
    if sa is not None and sa == sb:
        return "cross_numa"
    return "cross_socket"


@dataclass(eq=False)
class GpuMap:
    """The static GPU facts of one host topology; masks are bit ``i`` for ``addresses[i]``.

    ``levels[i][j]`` is the level joining GPUs i and j; ``nodes[i]`` a GPU's NUMA node.
    Results that depend on a mask are memoised in the instance (at most a few thousand).
    """

    addresses: tuple[str, ...]
    index: Mapping[str, int]
    nodes: tuple[int | None, ...]
    levels: tuple[tuple[str, ...], ...]
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, topology: HostTopology) -> GpuMap:
        """The map of every GPU of ``topology``, in its (PCI address) order."""
        gpus = topology.gpus
        sockets = {c.id: c.socket for c in topology.cells}
        levels = tuple(tuple(pair_level(a, b, topology.link(a.pci_address, b.pci_address),
                                        sockets) for b in gpus) for a in gpus)
        return cls(tuple(g.pci_address for g in gpus),
                   MappingProxyType({g.pci_address: i for i, g in enumerate(gpus)}),
                   tuple(gpu_node(g) for g in gpus), levels)

    def mask(self, addresses: Iterable[str]) -> int:
        """The bit mask of ``addresses`` (unknown addresses are ignored)."""
        bits = 0
        for address in addresses:
            i = self.index.get(address)
            if i is not None:
                bits |= 1 << i
        return bits

    def members(self, mask: int) -> tuple[int, ...]:
        """The GPU indices in ``mask``, ascending."""
        return tuple(i for i in range(len(self.addresses)) if mask >> i & 1)

    def _memoised(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered under ``key``."""
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            found = self._memo[key] = compute()
        return found

    def quality(self, mask: int, scores: Mapping[str, float] = DEFAULT_PAIR_SCORES,
                how: str = "weakest") -> float:
        """A set's quality: its weakest pair's score (or the mean over pairs); 1 for one GPU."""
        members = self.members(mask)
        if len(members) < 2:
            return scores.get("same_gpu", 1.0) if members else 0.0
        values = [scores[self.levels[i][j]] for i, j in combinations(members, 2)]
        return min(values) if how == "weakest" else sum(values) / len(values)

    def all_linked(self, mask: int, level: str = "nvlink") -> bool:
        """Whether every pair of the set is joined at ``level`` or better."""
        rank = RANK[level]
        return all(RANK[self.levels[i][j]] <= rank
                   for i, j in combinations(self.members(mask), 2))

    def best_set(self, free: int, k: int, scores: Mapping[str, float] = DEFAULT_PAIR_SCORES,
                 how: str = "weakest",
                 node_sets: tuple[frozenset[int | None], ...] | None = None
                 ) -> tuple[float, int] | None:
        """``(quality, mask)`` of the best ``k``-subset of ``free``; None when there is none.

        ``node_sets``: when given, a subset qualifies only if its GPUs' NUMA nodes all lie
        in one of them (the NUMA policy's allowed host cells). Ties: the lowest mask.
        """
        key = ("best", free, k, tuple(sorted(scores.items())), how, node_sets)
        found = self._memoised(key, lambda: self._best_set(free, k, scores, how, node_sets)
                               or ())
        return found or None

    def _best_set(self, free: int, k: int, scores: Mapping[str, float], how: str,
                  node_sets: tuple[frozenset[int | None], ...] | None
                  ) -> tuple[float, int] | None:
        """Enumerate the k-subsets (C(8, 4) = 70 on an 8-GPU host)."""
        best = None
        for subset in combinations(self.members(free), k):
            if node_sets is not None:
                nodes = {self.nodes[i] for i in subset}
                if not any(nodes <= allowed for allowed in node_sets):
                    continue
            mask = sum(1 << i for i in subset)
            value = self.quality(mask, scores, how)
            if best is None or value > best[0]:
                best = (value, mask)
        return best

    @property
    def per_node(self) -> int:
        """Most GPUs on one NUMA node of the host (all GPUs, free or not)."""
        return max((self.nodes.count(n) for n in set(self.nodes)), default=0)

    def clique_sizes(self, free: int, level: str, nodes: int | None = None) -> tuple[int, ...]:
        """Per GPU index: the largest set of free GPUs containing it, pairwise joined at ``level``.

        ``nodes``: only sets spanning at most that many NUMA nodes count (None: any).
        0 for GPUs not in ``free``. A GPU in such a set of size s can serve any request
        of s GPUs or fewer that needs that level and span.
        """
        table = self._memoised(("cliques", free, level), lambda: self._cliques(free, level))
        if not table:
            return ()
        span = len(table[0]) - 1 if nodes is None else min(nodes, len(table[0]) - 1)
        return tuple(row[span] for row in table)

    def _cliques(self, free: int, level: str) -> tuple[tuple[int, ...], ...]:
        """``[gpu][span]``: the largest clique through the GPU spanning at most ``span`` nodes.

        Cliques of the graph of pairs joined at ``level`` or better, found by enumerating
        the subsets of the free GPUs (255 on an 8-GPU host).
        """
        rank = RANK[level]
        count = len(self.addresses)
        adjacent = [sum(1 << j for j in range(count)
                        if j == i or RANK[self.levels[i][j]] <= rank) for i in range(count)]
        spans = len(set(self.nodes))
        best = [[0] * (spans + 1) for _ in range(count)]
        members = self.members(free)
        for size in range(1, len(members) + 1):
            for subset in combinations(members, size):
                mask = sum(1 << i for i in subset)
                if any(adjacent[i] & mask != mask for i in subset):
                    continue
                span = len({self.nodes[i] for i in subset})
                for i in subset:
                    best[i][span] = max(best[i][span], size)
        for row in best:
            for span in range(1, spans + 1):
                row[span] = max(row[span], row[span - 1])
        return tuple(tuple(row) for row in best)

    def usefulness(self, free: int, sizes: Sequence[tuple[int, float]], level: str,
                   numa_span: bool = True) -> float:
        """Expected free GPUs able to serve a request drawn from ``sizes``.

        ``sizes``: ``[(GPUs per request, probability)]``. A free GPU serves a request of
        k GPUs when it lies in a set of k free GPUs pairwise joined at ``level`` or better
        (:meth:`clique_sizes`) and, with ``numa_span``, on no more NUMA nodes than such a
        guest has cells under Nova's default ``legacy`` policy (one per ``per_node`` GPUs).
        The fragmentation measure of Weng et al., "Beware of Fragmentation" (USENIX ATC
        '23), turned around: their fragment is what is not counted here.
        """
        return self._memoised(("useful", free, tuple(sizes), level, numa_span),
                              lambda: self._usefulness(free, sizes, level, numa_span))

    def _usefulness(self, free: int, sizes: Sequence[tuple[int, float]], level: str,
                    numa_span: bool) -> float:
        """:meth:`usefulness`, computed."""
        per_node = max(1, self.per_node)
        total = 0.0
        for k, p in sizes:
            span = -(-k // per_node) if numa_span else None
            total += p * sum(1 for s in self.clique_sizes(free, level, span) if s >= k)
        return total


def vgpu_usefulness(free: Sequence[int], sizes: Sequence[tuple[int, float]], slots: int
                    ) -> float:
    """Expected free GPU capacity (in GPUs) able to serve a vGPU request drawn from ``sizes``.

    ``free``: free vGPUs per GPU; ``sizes``: ``[(vGPUs per request, probability)]``;
    ``slots``: vGPUs per GPU. A GPU's free vGPUs serve a request of s vGPUs when it has
    at least s free: the fractional-GPU case of Weng et al.'s fragmentation measure.
    """
    return sum(p * sum(f for f in free if f >= s) for s, p in sizes) / max(1, slots)


_MAPS: dict[tuple, tuple[Any, GpuMap]] = {}
_MAPS_LIMIT = 20000


def gpu_map(topology: HostTopology) -> GpuMap:
    """The GpuMap of a host topology, kept in its ``memo`` and shared by equal hosts.

    The map depends on the GPUs' addresses and NUMA nodes, the cells' sockets and the
    links. Hosts of one model report the same links, and the loader gives them one
    ``links`` object (:func:`cortex.knowledge.topology.topology_from_report`), so hosts
    equal in all of these share one map, and with it the results it memoises per set of
    free GPUs. The table of shared maps is keyed by those facts (the links by identity,
    held so that it cannot be reused) and cleared past 20,000 entries.
    """
    found = topology.memo.get("gpu_map")
    if found is None:
        links = topology.links
        key = (id(links), tuple(g.pci_address for g in topology.gpus),
               tuple(gpu_node(g) for g in topology.gpus),
               tuple((c.id, c.socket) for c in topology.cells))
        entry = _MAPS.get(key)
        if entry is None or entry[0] is not links:
            if len(_MAPS) >= _MAPS_LIMIT:
                _MAPS.clear()
            entry = _MAPS[key] = (links, GpuMap.build(topology))
        found = topology.memo["gpu_map"] = entry[1]
    return found


def can_place_connected(topology: HostTopology, count: int) -> bool:
    """Whether ``count`` free, healthy passthrough GPUs are pairwise NVLink-connected.

    NVLink direct or through NVSwitch (``GpuLink.nvlink > 0``), the largest clique of
    the free healthy GPUs (:meth:`GpuMap.clique_sizes`). A ``count`` below 2 only needs
    enough free healthy GPUs.
    """
    free = [g.pci_address for g in topology.free_gpus if g.healthy]
    if count < 2:
        return len(free) >= count
    gpus = gpu_map(topology)
    return max(gpus.clique_sizes(gpus.mask(free), "nvlink"), default=0) >= count


def whole_cell_gpus(topology: HostTopology, free: Iterable[str]) -> int:
    """How many of the ``free`` GPUs (PCI addresses) lie in NVLink cells free as a whole.

    A cell is a largest NVLink clique over the host's healthy passthrough GPUs; a GPU
    counts when its cell among the free GPUs is as large as among all of them.
    """
    gpus = gpu_map(topology)
    usable = gpus.mask(g.pci_address for g in topology.gpus if g.passthrough and g.healthy)
    free_mask = gpus.mask(free) & usable
    if not free_mask:
        return 0
    whole = gpus.clique_sizes(usable, "nvlink")
    now = gpus.clique_sizes(free_mask, "nvlink")
    return sum(1 for i in gpus.members(free_mask) if whole[i] > 1 and now[i] == whole[i])


def free_gpus(topology: HostTopology) -> set[str]:
    """The healthy passthrough GPUs no guest holds."""
    return {g.pci_address for g in topology.gpus
            if g.passthrough and g.healthy and not g.in_use}
