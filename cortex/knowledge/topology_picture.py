"""Read a host's GPU/NUMA topology for pictures and KPIs, whatever exact shape it has.

The one place that knows how the topology issue's ``HostState.topology`` looks, so
the dashboard, ``/metrics`` and the decision counters do not: adapt this module if
that shape moves. Expected (``cortex/knowledge/topology.py`` of the topology work):
``topology.cells`` (NUMA cells: ``id``, ``socket``, ``cpus``, ``pcpuset``,
``pinned_cpus``, ``memory``, ``memory_usage`` in MiB); ``topology.gpus``
(``pci_address``, ``name``, ``numa_node``, ``in_use``, ``healthy``, ``passthrough``
(False for a GPU split by MIG or vGPU), ``mig_instances`` with ``profile`` and
``in_use``); ``topology.links`` (a mapping of address pairs, both orders, or an
iterable, of links with ``a``, ``b``, ``nvlink`` (active NVLinks, NVSwitch paths
included) and ``topology`` (NVML's P2P level: ``INTERNAL``, ``SINGLE``, ``MULTIPLE``,
``HOSTBRIDGE``, ``NODE``, ``SYSTEM``)). Missing attributes read as empty.
A host without the attribute, or with ``None``, has no picture. Checked against that
work's ``topology_from_report`` on its four shipped reports (HGX H100, A100 MIG, A100
NVLink pairs, L40S) before it merged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any


@dataclass(frozen=True, slots=True)
class CellPicture:
    """A NUMA cell: CPUs (all, dedicated, pinned), memory and its usage in MiB."""

    id: int
    socket: int | None
    cpus: int
    dedicated: int
    pinned: int
    memory_mb: int
    memory_used_mb: int


@dataclass(frozen=True, slots=True)
class GpuPicture:
    """A GPU: PCI address, model name, NUMA cell (None: unknown), taken, healthy, MIG.

    ``passthrough``: the whole GPU can be given to one instance (not split by MIG/vGPU).
    """

    address: str
    name: str
    cell: int | None
    in_use: bool
    healthy: bool
    mig: tuple[str, ...]
    passthrough: bool = True


@dataclass(frozen=True, slots=True)
class LinkPicture:
    """What joins GPUs ``a`` and ``b``: active NVLinks (0: none) and the P2P level."""

    a: str
    b: str
    nvlink: int
    level: str | None


@dataclass(frozen=True, slots=True)
class TopologyPicture:
    """A host's topology reduced to what is drawn and counted; links once per pair."""

    cells: tuple[CellPicture, ...]
    gpus: tuple[GpuPicture, ...]
    links: tuple[LinkPicture, ...]

    def link(self, a: str, b: str) -> LinkPicture | None:
        """The link between ``a`` and ``b`` in either order, or None."""
        return next((k for k in self.links if {k.a, k.b} == {a, b}), None)


def picture(host: Any) -> TopologyPicture | None:
    """The TopologyPicture of ``host`` (a HostState), or None when none was reported."""
    topology = getattr(host, "topology", None)
    if topology is None:
        return None
    cells = tuple(_cell(c) for c in getattr(topology, "cells", ()) or ())
    gpus = tuple(_gpu(g) for g in getattr(topology, "gpus", ()) or ())
    return TopologyPicture(cells, gpus, _links(getattr(topology, "links", ()) or ()))


def _size(value: Any) -> int:
    """Count of a CPU set (a set, a list or already a number)."""
    if isinstance(value, int):
        return value
    return len(value or ())


def _cell(cell: Any) -> CellPicture:
    """A CellPicture of a NUMA cell object."""
    return CellPicture(int(cell.id), getattr(cell, "socket", None),
                       _size(getattr(cell, "cpus", ())), _size(getattr(cell, "pcpuset", ())),
                       _size(getattr(cell, "pinned_cpus", ())),
                       int(getattr(cell, "memory", 0) or 0),
                       int(getattr(cell, "memory_usage", 0) or 0))


def _gpu(gpu: Any) -> GpuPicture:
    """A GpuPicture of a GPU object."""
    mig = tuple(f"{i.profile}{' (in use)' if getattr(i, 'in_use', False) else ''}"
                for i in getattr(gpu, "mig_instances", ()) or ())
    return GpuPicture(str(gpu.pci_address), getattr(gpu, "name", None) or "GPU",
                      getattr(gpu, "numa_node", None), bool(getattr(gpu, "in_use", False)),
                      bool(getattr(gpu, "healthy", True)), mig,
                      bool(getattr(gpu, "passthrough", True)))


def _links(links: Mapping | Iterable) -> tuple[LinkPicture, ...]:
    """Each GPU pair's link once, sorted by address pair."""
    items = links.values() if isinstance(links, Mapping) else links
    unique: dict[tuple[str, str], LinkPicture] = {}
    for link in items:
        a, b = sorted((str(link.a), str(link.b)))
        unique[a, b] = LinkPicture(a, b, int(getattr(link, "nvlink", 0) or 0),
                                   getattr(link, "topology", None))
    return tuple(unique[k] for k in sorted(unique))


def nvlink_pairs(topology: TopologyPicture) -> frozenset[frozenset[str]]:
    """The GPU address pairs joined by at least one NVLink."""
    return frozenset(frozenset((k.a, k.b)) for k in topology.links if k.nvlink > 0)


def nvlink_connected(topology: TopologyPicture, addresses: Iterable[str]) -> bool:
    """Whether every pair of ``addresses`` is joined by at least one NVLink."""
    pairs = nvlink_pairs(topology)
    return all(frozenset(p) in pairs for p in combinations(sorted(set(addresses)), 2))


def can_place_connected(topology: TopologyPicture, count: int) -> bool:
    """Whether ``count`` free, healthy passthrough GPUs are pairwise NVLink-connected.

    Tries the sets of free GPUs (at most C(16, 8) = 12,870 for the largest hosts; a
    host has few free GPUs in practice). A ``count`` below 2 only needs enough free GPUs.
    """
    free = [g.address for g in topology.gpus if not g.in_use and g.healthy and g.passthrough]
    if count < 2:
        return len(free) >= count
    pairs = nvlink_pairs(topology)
    return any(all(frozenset(p) in pairs for p in combinations(group, 2))
               for group in combinations(free, count))
