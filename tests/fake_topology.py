"""A host topology shaped as the topology work's ``HostTopology`` (cells, gpus, links).

Only the attributes cortex.knowledge.topology_picture reads, which it reads from the
real ``HostTopology`` too (tests/unit/test_topology_picture.py checks both shapes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType

from tests.fakes import host, inventory


@dataclass(frozen=True)
class Cell:
    id: int
    socket: int | None
    cpus: frozenset
    pcpuset: frozenset
    pinned_cpus: frozenset
    memory: int
    memory_usage: int = 0


@dataclass(frozen=True)
class Mig:
    profile: str
    in_use: bool = False


@dataclass(frozen=True)
class Gpu:
    pci_address: str
    name: str
    numa_node: int | None
    in_use: bool = False
    healthy: bool = True
    mig_instances: tuple = ()
    passthrough: bool = True


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    nvlink: int
    p2p_nvlink: str | None
    topology: str | None


@dataclass(frozen=True)
class Topology:
    cells: tuple
    gpus: tuple
    links: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


def address(i: int) -> str:
    return f"0000:{0x18 + 0x10 * i:02x}:00.0"


def hgx(in_use=(), nvswitch=True, unhealthy=(), pairs=None) -> Topology:
    """Eight H100 on two NUMA cells; NVSwitch (all pairs, 18 links) or only ``pairs``."""
    cells = (Cell(0, 0, frozenset(range(112)), frozenset(range(8, 112)), frozenset(range(8, 24)),
                  1048576, 262144),
             Cell(1, 1, frozenset(range(112, 224)), frozenset(range(120, 224)), frozenset(),
                  1048576, 0))
    gpus = tuple(Gpu(address(i), "NVIDIA H100 80GB HBM3", 0 if i < 4 else 1, i in in_use,
                     i not in unhealthy) for i in range(8))
    links = {}
    for i in range(8):
        for j in range(i + 1, 8):
            nvlink = 18 if nvswitch else (4 if (i, j) in (pairs or ()) else 0)
            level = "MULTIPLE" if i // 2 == j // 2 else ("NODE" if i // 4 == j // 4 else "SYSTEM")
            link = Link(address(i), address(j), nvlink, "OK" if nvlink else None, level)
            links[link.a, link.b] = links[link.b, link.a] = link
    return Topology(cells, gpus, MappingProxyType(links))


def topology_host(name="cmp-topo", topology=None, **kwargs):
    """A HostState carrying ``topology`` (a plain attribute, as the topology work adds it)."""
    base = host(name, inventories={"CUSTOM_PCI_10DE_2330": inventory(8, used=2),
                                   "VCPU": inventory(16)}, **kwargs)
    return with_topology(base, topology if topology is not None else hgx())


def with_topology(state, topology):
    """``state`` (a HostState) with ``topology`` set."""
    return dataclasses.replace(state, topology=topology)
