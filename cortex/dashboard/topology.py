"""A host's topology drawn: NUMA cells, their GPUs and the links (the host page).

Coordinates for the SVG the template draws (:func:`topology_layout`) and the
``nvidia-smi topo -m`` style matrix (:func:`topology_matrix`), from the knowledge's
:class:`~cortex.knowledge.topology.HostTopology`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cortex.dashboard.units import quantity
from cortex.knowledge.topology import GpuLink, HostTopology, NumaCell

#: Abbreviations of NVML's P2P levels, as ``nvidia-smi topo -m`` prints them.
LEVELS = {"INTERNAL": "X", "SINGLE": "PIX", "MULTIPLE": "PXB", "HOSTBRIDGE": "PHB",
          "NODE": "NODE", "SYSTEM": "SYS"}
_DRAWN_LEVELS = ("SINGLE", "MULTIPLE")
_GPU_W, _GPU_H, _GAP, _TOP = 118, 52, 16, 96


@dataclass(frozen=True)
class Box:
    """A rectangle of the topology picture with its label lines."""

    x: float
    y: float
    width: float
    height: float
    lines: tuple[str, ...]
    css: str


def topology_layout(topology: HostTopology) -> dict[str, Any]:
    """Coordinates of the host picture: NUMA cells on top, their GPUs below, links.

    GPUs sit in one row, grouped under their cell (unknown cell last); NVLinks are
    drawn as arcs under the row (width by link count), PCIe links between GPUs behind
    one switch (``PIX``/``PXB``) as dashed arcs; when every pair of three or more
    GPUs is NVLink-joined (NVSwitch) one bar stands for all of them. Returns
    ``{width, height, cells, gpus, arcs, bar, bottom, mig}`` for the template; ``mig``
    lists ``(PCI address, instance labels)`` of the GPUs split by MIG.
    """
    groups = [(c, [g for g in topology.gpus if g.numa_node == c.id]) for c in topology.cells]
    known = {c.id for c in topology.cells}
    orphans = [g for g in topology.gpus if g.numa_node not in known]
    if orphans:
        groups.append((None, orphans))
    cells, gpus, centre, x = [], [], {}, 10.0
    for cell, members in groups:
        width = max(len(members), 1) * (_GPU_W + _GAP) - _GAP
        cells.append(Box(x, 10, width, 64, _cell_lines(cell), "cell"))
        for i, gpu in enumerate(members):
            gx = x + i * (_GPU_W + _GAP)
            css = "gpu " + ("used" if gpu.in_use else "free") + ("" if gpu.healthy
                                                                 else " unhealthy")
            name = (gpu.name or "GPU").removeprefix("NVIDIA ")[:17]
            gpus.append(Box(gx, _TOP, _GPU_W, _GPU_H, (name, gpu.pci_address,
                                                       "in use" if gpu.in_use else "free"), css))
            centre[gpu.pci_address] = gx + _GPU_W / 2
        x += width + 3 * _GAP
    arcs, bar = _arcs(topology, centre)
    depth = max((a["depth"] for a in arcs), default=0)
    height = _TOP + _GPU_H + max(depth, 40 if bar else 0) + 30
    mig = [(g.pci_address, [f"{i.profile}{' (in use)' if i.in_use else ''}"
                            for i in g.mig_instances]) for g in topology.gpus if g.mig_instances]
    return {"width": max(x, 300), "height": height, "cells": cells, "gpus": gpus,
            "arcs": arcs, "bar": bar, "bottom": _TOP + _GPU_H, "mig": mig}


def _cell_lines(cell: NumaCell | None) -> tuple[str, ...]:
    """Label of a NUMA cell box."""
    if cell is None:
        return ("NUMA cell unknown",)
    socket = f", socket {cell.socket}" if cell.socket is not None else ""
    memory = (f"{quantity(cell.memory, 'MEMORY_MB')}, "
              f"{quantity(cell.memory_usage, 'MEMORY_MB')} used")
    return (f"NUMA {cell.id}{socket}",
            f"{len(cell.cpus)} CPUs, {len(cell.pcpuset)} dedicated, "
            f"{len(cell.pinned_cpus)} pinned", memory)


def pair_links(topology: HostTopology) -> list[GpuLink]:
    """Each GPU pair's link once (the topology maps both orders), by address pair."""
    return sorted((k for (a, b), k in topology.links.items() if a < b),
                  key=lambda k: tuple(sorted((k.a, k.b))))


def _arcs(topology: HostTopology, centre: dict[str, float]):
    """Arcs between GPU centres, or an NVSwitch bar when all pairs have NVLink."""
    addresses = [g.pci_address for g in topology.gpus]
    links = pair_links(topology)
    nvlinked = {frozenset((k.a, k.b)) for k in links if k.nvlink > 0}
    all_pairs = len(addresses) >= 3 and all(
        frozenset((a, b)) in nvlinked for i, a in enumerate(addresses) for b in addresses[i + 1:])
    bottom = _TOP + _GPU_H
    if all_pairs:
        counts = sorted({k.nvlink for k in links if k.nvlink > 0})
        xs = [centre[a] for a in addresses]
        return [], {"x1": min(xs), "x2": max(xs), "y": bottom + 30, "xs": xs,
                    "label": f"NVLink all-to-all ({'/'.join(map(str, counts))} links per pair)"}
    arcs = []
    for link in links:
        if link.a not in centre or link.b not in centre:
            continue
        if link.nvlink <= 0 and link.topology not in _DRAWN_LEVELS:
            continue
        x1, x2 = sorted((centre[link.a], centre[link.b]))
        depth = 18 + (x2 - x1) / 5
        arcs.append({"path": f"M {x1:.0f} {bottom} Q {(x1 + x2) / 2:.0f} {bottom + 2 * depth:.0f}"
                             f" {x2:.0f} {bottom}",
                     "css": "nvlink" if link.nvlink > 0 else "pcie",
                     "width": 1.5 + min(link.nvlink, 18) / 4 if link.nvlink > 0 else 1.2,
                     "depth": depth, "title": _link_title(link)})
    return arcs, None


def _link_title(link: GpuLink) -> str:
    """Tooltip of a link."""
    kind = f"{link.nvlink} NVLinks" if link.nvlink > 0 else "no NVLink"
    a, b = sorted((link.a, link.b))
    return f"{a} - {b}: {kind}, PCIe {link.topology or 'unknown'}"


def topology_matrix(topology: HostTopology) -> dict[str, Any]:
    """``nvidia-smi topo -m`` style matrix: ``NV<n>`` or the PCIe level per GPU pair."""
    addresses = [g.pci_address for g in topology.gpus]
    rows = []
    for a in addresses:
        cells = []
        for b in addresses:
            link = topology.link(a, b)
            if a == b:
                cells.append("X")
            elif link is None:
                cells.append("?")
            else:
                cells.append(f"NV{link.nvlink}" if link.nvlink > 0
                             else LEVELS.get(link.topology or "", link.topology or "?"))
        rows.append((a, cells))
    return {"addresses": addresses, "rows": rows}
