"""Store agent topology reports in the topology tables (the one writer of those tables).

``store_report`` checks a report and replaces a host's report in the caller's
transaction, bumping the knowledge version when the view's topology changes; the
agents' endpoint and the fleet import call it. They are read back by
:mod:`cortex.knowledge.reports`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert

from cortex.cpuset import parse_cpuset
from cortex.db import models
from cortex.knowledge.reports import read_reports
from cortex.knowledge.topology import IN_USE_SOURCES, topology_from_report
from cortex.store.version import bump_version


class TopologyError(ValueError):
    """A report that is well-typed but inconsistent (answered with 400); nothing was written."""


def check_report(report: Mapping[str, Any]) -> None:
    """Raise TopologyError unless ids are unique and every reference resolves.

    Cells have distinct ids and valid CPU lists whose dedicated, shared, pinned CPUs and
    siblings lie inside the cell; GPUs have distinct PCI addresses, a NUMA node that is
    a cell (or null), distinct MIG instance ids; links join two distinct known GPUs once.
    """
    cells = {}
    for cell in report.get("numa_cells", ()):
        if cell["id"] in cells:
            raise TopologyError(f"numa_cells: cell {cell['id']} appears twice")
        cells[cell["id"]] = _cell_cpus(cell)
    gpus = set()
    for gpu in report.get("gpus", ()):
        address = gpu["pci_address"]
        if address in gpus:
            raise TopologyError(f"gpus: {address} appears twice")
        gpus.add(address)
        for key in ("numa_node", "pci_numa_node"):
            if gpu.get(key) is not None and gpu[key] not in cells:
                raise TopologyError(f"gpus: {address} {key} {gpu[key]} is not a NUMA cell")
        ids = [i["id"] for i in (gpu.get("mig") or {}).get("instances", ())]
        if len(ids) != len(set(ids)):
            raise TopologyError(f"gpus: {address} has duplicate MIG instance ids")
        if gpu.get("in_use_source") not in (None, *IN_USE_SOURCES):
            raise TopologyError(f"gpus: {address} in_use_source {gpu['in_use_source']!r}")
    pairs = set()
    for link in report.get("gpu_links", ()):
        pair = tuple(sorted((link["a"], link["b"])))
        if pair[0] == pair[1] or not set(pair) <= gpus:
            raise TopologyError(f"gpu_links: {link['a']}-{link['b']} does not join two GPUs "
                                "of the report")
        if pair in pairs:
            raise TopologyError(f"gpu_links: {pair[0]}-{pair[1]} appears twice")
        pairs.add(pair)


def _cell_cpus(cell: Mapping[str, Any]) -> frozenset[int]:
    """The cell's CPUs, after checking its CPU lists; TopologyError when they do not fit."""
    try:
        cpus = parse_cpuset(cell.get("cpus"))
        parts = {k: parse_cpuset(cell.get(k)) for k in (
            "dedicated_cpus", "shared_cpus", "pinned_cpus")}
        siblings = [parse_cpuset(s) for s in cell.get("siblings", ())]
    except ValueError as exc:
        raise TopologyError(f"numa_cells: cell {cell['id']}: {exc}") from None
    for name, part in [*parts.items(), *(("siblings", s) for s in siblings)]:
        if not part <= cpus:
            raise TopologyError(f"numa_cells: cell {cell['id']}: {name} outside the cell's CPUs")
    return cpus


def store_report(connection: Connection, host: str, report: Mapping[str, Any],
                 reported_at: datetime, bump: bool = True) -> dict[str, Any]:
    """Replace ``host``'s topology with ``report`` (checked first), in the caller's transaction.

    Bumps the knowledge version when the host's topology as the view holds it changed
    (a report repeating the last one only refreshes the rows and their time, so a fleet
    of agents reporting every minute does not make every worker reload), and never
    when ``bump`` is False (a fleet import bumps once). Returns ``{"host",
    "reported_at", "numa_cells", "gpus", "gpu_links", "knowledge_changed"}``.
    Raises TopologyError before writing anything when the report is inconsistent.
    """
    check_report(report)
    previous = read_reports(connection, [host]).get(host)
    changed = previous is None or topology_from_report(previous) != topology_from_report(report)
    connection.execute(delete(models.HostTopology).where(models.HostTopology.host == host))
    topology_id = connection.execute(insert(models.HostTopology).values(
        host=host, reported_at=reported_at, collected_at=report.get("collected_at"),
        agent_version=report.get("agent_version"), driver_version=report.get("driver_version"),
        cuda_driver_version=report.get("cuda_driver_version"),
        nvml_error=report.get("nvml_error"), guests=report.get("guests"),
        nics=list(report.get("nics", ())), cpu_info=dict(report.get("cpu_info") or {}),
        host_ip=report.get("host_ip"),
    ).returning(models.HostTopology.id)).scalar_one()
    cells = [_cell_row(topology_id, c) for c in report.get("numa_cells", ())]
    if cells:
        connection.execute(insert(models.NumaCell), cells)
    for gpu in report.get("gpus", ()):
        _insert_gpu(connection, topology_id, gpu)
    links = [_link_row(topology_id, link) for link in report.get("gpu_links", ())]
    if links:
        connection.execute(insert(models.GpuLink), links)
    if bump and changed:
        bump_version(connection)
    return {"host": host, "reported_at": reported_at.isoformat(), "numa_cells": len(cells),
            "gpus": len(report.get("gpus", ())), "gpu_links": len(links),
            "knowledge_changed": changed}


def _cell_row(topology_id: int, cell: Mapping[str, Any]) -> dict[str, Any]:
    """A numa_cells row."""
    return {"host_topology_id": topology_id, "cell_id": cell["id"], "socket": cell.get("socket"),
            "cpus": cell.get("cpus") or "", "dedicated_cpus": cell.get("dedicated_cpus") or "",
            "shared_cpus": cell.get("shared_cpus") or "",
            "siblings": list(cell.get("siblings", ())), "memory_mb": cell["memory_mb"],
            "memory_usage_mb": cell.get("memory_usage_mb", 0),
            "cpu_usage": cell.get("cpu_usage", 0), "pinned_cpus": cell.get("pinned_cpus") or "",
            "mempages": [dict(p) for p in cell.get("mempages", ())],
            "distances": list(cell.get("distances", ()))}


def _insert_gpu(connection: Connection, topology_id: int, gpu: Mapping[str, Any]) -> None:
    """A gpus row and its MIG instances."""
    mig = gpu.get("mig") or {}
    health = gpu.get("health") or {}
    fabric = gpu.get("fabric") or {}
    gpu_id = connection.execute(insert(models.Gpu).values(
        host_topology_id=topology_id, pci_address=gpu["pci_address"],
        gpu_index=gpu.get("index"), uuid=gpu.get("uuid"), name=gpu.get("name"),
        vendor_id=gpu.get("vendor_id") or "10de", device_id=gpu.get("device_id"),
        dev_type=gpu.get("dev_type") or "type-PCI", driver=gpu.get("driver"),
        memory_mb=gpu.get("memory_mb"), numa_node=gpu.get("numa_node"),
        numa_source=gpu.get("numa_source"), pci_numa_node=gpu.get("pci_numa_node"),
        cpu_affinity=gpu.get("cpu_affinity"), mig_mode=mig.get("mode"),
        mig_pending=mig.get("pending"), virtualization_mode=gpu.get("virtualization_mode"),
        compute_capability=gpu.get("compute_capability"),
        healthy=bool(health.get("healthy", True)), health_reasons=list(health.get("reasons", ())),
        in_use=bool(gpu.get("in_use")), in_use_source=gpu.get("in_use_source"),
        vgpus_in_use=gpu.get("vgpus_in_use", 0), fabric_clique=fabric.get("clique_id"),
        fabric_cluster=fabric.get("cluster_uuid"), unsupported=list(gpu.get("unsupported", ())),
        instance_uuid=gpu.get("instance_uuid"), power_watts=gpu.get("power_watts"),
    ).returning(models.Gpu.id)).scalar_one()
    instances = [{"gpu_id": gpu_id, "instance_id": i["id"], "profile_id": i["profile_id"],
                  "profile": i["profile"], "placement_start": i.get("placement_start", 0),
                  "placement_size": i.get("placement_size", 0),
                  "memory_mb": i.get("memory_mb", 0), "in_use": bool(i.get("in_use"))}
                 for i in mig.get("instances", ())]
    if instances:
        connection.execute(insert(models.MigInstance), instances)


def _link_row(topology_id: int, link: Mapping[str, Any]) -> dict[str, Any]:
    """A gpu_links row, its pair ordered."""
    a, b = sorted((link["a"], link["b"]))
    return {"host_topology_id": topology_id, "gpu_a": a, "gpu_b": b,
            "nvlink": link.get("nvlink", 0), "p2p_nvlink": link.get("p2p_nvlink"),
            "topology_level": link.get("topology")}
