"""Small GPU topologies built as the real ``HostTopology`` (cortex.knowledge.topology).

``hgx()`` is an 8-GPU H100 board on two NUMA cells, NVSwitch-joined or with only some
NVLink pairs; ``topology_host`` puts one on a HostState.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from cortex.knowledge.topology import Gpu, GpuLink, HostTopology, MigInstance, NumaCell
from tests.fakes import host, inventory


def address(i: int) -> str:
    return f"0000:{0x18 + 0x10 * i:02x}:00.0"


def cell(cell_id: int, socket: int, cpus: range, dedicated: range, pinned: range,
         memory: int, used: int) -> NumaCell:
    return NumaCell(cell_id, socket, frozenset(cpus), frozenset(dedicated),
                    frozenset(cpus) - frozenset(dedicated), (), memory, used,
                    pinned_cpus=frozenset(pinned))


def hgx(in_use=(), nvswitch=True, unhealthy=(), pairs=None) -> HostTopology:
    """Eight H100 on two NUMA cells; NVSwitch (all pairs, 18 links) or only ``pairs``."""
    cells = (cell(0, 0, range(112), range(8, 112), range(8, 24), 1048576, 262144),
             cell(1, 1, range(112, 224), range(120, 224), range(0), 1048576, 0))
    gpus = tuple(Gpu(address(i), "10de", "2330", name="NVIDIA H100 80GB HBM3",
                     numa_node=0 if i < 4 else 1, pci_numa_node=0 if i < 4 else 1,
                     in_use=i in in_use, healthy=i not in unhealthy) for i in range(8))
    links = {}
    for i in range(8):
        for j in range(i + 1, 8):
            nvlink = 18 if nvswitch else (4 if (i, j) in (pairs or ()) else 0)
            level = "MULTIPLE" if i // 2 == j // 2 else ("NODE" if i // 4 == j // 4 else "SYSTEM")
            link = GpuLink(address(i), address(j), nvlink, "OK" if nvlink else None, level)
            links[link.a, link.b] = links[link.b, link.a] = link
    return HostTopology(cells, gpus, MappingProxyType(links))


def split_by_mig(topology: HostTopology, index: int, profile: str = "3g.40gb") -> HostTopology:
    """``topology`` with GPU ``index`` in MIG mode holding one free instance of ``profile``."""
    instance = MigInstance(1, 9, profile, 0, 4, 40960)
    return dataclasses.replace(topology, gpus=tuple(
        dataclasses.replace(g, mig_mode="enabled", mig_instances=(instance,)) if i == index
        else g for i, g in enumerate(topology.gpus)))


def topology_host(name="cmp-topo", topology=None, **kwargs):
    """A HostState carrying ``topology`` (an HGX board by default)."""
    base = host(name, inventories={"CUSTOM_PCI_10DE_2330": inventory(8, used=2),
                                   "VCPU": inventory(16)}, **kwargs)
    return with_topology(base, topology if topology is not None else hgx())


def with_topology(state, topology):
    """``state`` (a HostState) with ``topology`` set."""
    return dataclasses.replace(state, topology=topology)
