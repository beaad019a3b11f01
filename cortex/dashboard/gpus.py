"""The GPU occupancy heatmap's rows: one square per GPU, NVLink islands boxed.

Read from the worker's knowledge view: hosts with a topology report count their
reported GPUs, the others their passthrough GPU inventories.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cortex.dashboard.fleet import host_status
from cortex.knowledge import kpis
from cortex.knowledge.topology import Gpu
from cortex.knowledge.view import KnowledgeView

#: States of a GPU cell, as CSS classes and in the legend's order.
GPU_STATES = ("free", "used", "partial", "unhealthy")
GPU_STATE_LABELS = {"free": "free", "used": "used", "partial": "MIG / vGPU, partly used",
                    "unhealthy": "unhealthy"}
_HEATMAP_MEMO: list[Any] = [None]


def gpu_state(gpu: Gpu) -> str:
    """The heatmap state of one GPU (:data:`GPU_STATES`).

    ``unhealthy`` when the agent says so (whatever its use); a GPU split by MIG is
    ``used`` when all its instances are, else ``partial``; a vGPU host GPU (time
    sliced) holding vGPUs is ``partial``; otherwise ``used`` or ``free`` as
    ``in_use`` says.
    """
    if not gpu.healthy:
        return "unhealthy"
    if gpu.mig_mode == "enabled" or gpu.mig_instances:
        busy = sum(1 for i in gpu.mig_instances if i.in_use)
        return "used" if gpu.mig_instances and busy == len(gpu.mig_instances) else "partial"
    if gpu.in_use:
        return "used"
    if gpu.vgpus_in_use > 0:
        return "partial"
    return "free"


def _topology_model(gpu: Gpu) -> str:
    """The GPU's model as the fleet page names it (``H100 SXM5 80GB``), else its name."""
    named = (gpu.name or "").removeprefix("NVIDIA ").strip()
    if gpu.device_id:
        model = kpis.gpu_model(f"CUSTOM_PCI_{gpu.vendor_id.upper()}_{gpu.device_id.upper()}")
        if model and (not model.startswith("PCI ") or not named):
            return model
    return named or "GPU"


@dataclass(frozen=True)
class GpuHost:
    """A heatmap row before drawing: the host, its zone, GPU models and state counts.

    ``source`` is ``agent`` (cells from the topology report) or ``placement`` (no
    report: cells from the passthrough GPU inventories' used and free units).
    """

    host: Any
    zone: str
    models: tuple[str, ...]
    counts: dict[str, int]
    source: str


def gpu_hosts(view: KnowledgeView) -> list[GpuHost]:
    """Every host with GPUs, by name, counted once per knowledge view (kept for the next).

    Hosts with a topology report count their reported GPUs; hosts without one, their
    passthrough GPU inventories (``CUSTOM_PCI_*``: used units as ``used``, the rest
    ``free``); vGPU-only hosts without a report are left out (no per-GPU facts).
    """
    memo = _HEATMAP_MEMO[0]
    if memo is not None and memo[0] is view:
        return memo[1]
    rows = []
    for host in sorted(view.hosts.values(), key=lambda h: h.host):
        topology = host.topology
        if topology is not None and topology.gpus:
            counts = dict.fromkeys(GPU_STATES, 0)
            for gpu in topology.gpus:
                counts[gpu_state(gpu)] += 1
            models = tuple(sorted({_topology_model(g) for g in topology.gpus}))
            rows.append(GpuHost(host, kpis.zone_of(host), models, counts, "agent"))
            continue
        placed = [(model, inv) for model, whole, inv in kpis.host_gpus(host) if whole]
        if placed:
            used = sum(min(int(inv.used), int(inv.total)) for _, inv in placed)
            total = sum(int(inv.total) for _, inv in placed)
            counts = dict.fromkeys(GPU_STATES, 0) | {"used": used, "free": total - used}
            rows.append(GpuHost(host, kpis.zone_of(host),
                                tuple(sorted({m for m, _ in placed})), counts, "placement"))
    _HEATMAP_MEMO[0] = (view, rows)
    return rows


def heatmap_row(row: GpuHost) -> dict[str, Any]:
    """One drawn row: ``{host, zone, status, models, counts, source, islands}``.

    ``islands`` are the host's NVLink islands as the knowledge computes them
    (:attr:`~cortex.knowledge.topology.HostTopology.nvlink_islands`), in the order of
    their first GPU: ``{nvlink, cells: [{state, title}]}``; a GPU without NVLink is an
    island of its own with ``nvlink`` False. Hosts known from Placement only have one
    island of counted cells.
    """
    host = row.host
    base = {"host": host.host, "zone": row.zone, "status": host_status(host),
            "models": row.models, "counts": row.counts, "source": row.source}
    if row.source == "placement":
        cells = ([{"state": "used", "title": "used (Placement)"}] * row.counts["used"]
                 + [{"state": "free", "title": "free (Placement)"}] * row.counts["free"])
        return base | {"islands": [{"nvlink": False, "cells": cells}]}
    topology = host.topology
    order = {g.pci_address: i for i, g in enumerate(topology.gpus)}
    by_address = {g.pci_address: g for g in topology.gpus}
    islands = []
    for island in sorted(topology.nvlink_islands, key=lambda s: min(order[a] for a in s)):
        members = sorted(island, key=order.__getitem__)
        islands.append({"nvlink": len(members) > 1,
                        "cells": [_gpu_cell(by_address[a], len(row.models) > 1)
                                  for a in members]})
    return base | {"islands": islands}


def _gpu_cell(gpu: Gpu, mixed: bool) -> dict[str, str]:
    """A GPU's cell: its state and a short tooltip (address, use, MIG, vGPUs, health).

    The model is named only on a host of ``mixed`` models (the row names it otherwise).
    """
    state = gpu_state(gpu)
    parts = [gpu.pci_address, *([_topology_model(gpu)] if mixed else []),
             GPU_STATE_LABELS[state]]
    if gpu.mig_instances:
        busy = sum(1 for i in gpu.mig_instances if i.in_use)
        parts.append(f"MIG {busy}/{len(gpu.mig_instances)} instances in use")
    elif gpu.mig_mode == "enabled":
        parts.append("MIG enabled, no instances")
    if gpu.vgpus_in_use:
        parts.append(f"{gpu.vgpus_in_use} vGPUs")
    if gpu.health_reasons:
        parts.append("; ".join(gpu.health_reasons))
    return {"state": state, "title": " · ".join(parts)}
