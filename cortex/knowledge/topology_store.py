"""Store agent topology reports in the topology tables and read them back as report documents.

``store_report`` replaces a host's report in the caller's transaction and bumps the
knowledge version; ``read_reports`` gives back documents of the ``TopologyReport``
shape (plus ``reported_at``), from which :func:`topology_from_report` builds the view.
Handlers and the loader call these; nothing else writes the topology tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select
from sqlalchemy.orm import Session

from cortex.cpuset import parse_cpuset
from cortex.db import models
from cortex.knowledge.fleet import bump_version
from cortex.knowledge.topology import IN_USE_SOURCES, topology_from_report


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
        nics=list(report.get("nics", ())),
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


def report_times(bind: Connection | Session) -> dict[str, datetime]:
    """``{host: reported_at}`` of every stored report (one cheap query)."""
    query = select(models.HostTopology.host, models.HostTopology.reported_at)
    return {row.host: row.reported_at for row in bind.execute(query)}


def read_reports(bind: Connection | Session, hosts: Iterable[str] | None = None
                 ) -> dict[str, dict[str, Any]]:
    """``{host: report document}`` for ``hosts`` (all when None), each with ``reported_at``.

    ``bind`` is a Connection or an ORM Session (the loader's). The documents have the
    ``TopologyReport`` shape (links with their pair ordered) plus ``host`` and
    ``reported_at`` (a datetime). Five plain queries, whatever the number of hosts.
    """
    tables = models.HostTopology.__table__
    query = select(tables)
    if hosts is not None:
        query = query.where(tables.c.host.in_(list(hosts)))
    documents = {row.id: _header(row) for row in bind.execute(query)}
    if not documents:
        return {}
    # The children are selected by a subquery of the same reports, never by a list of
    # ids: PostgreSQL's protocol takes at most 65,535 parameters in one statement, and
    # 10,000 GPU hosts have 80,000 GPUs.
    reports = select(tables.c.id).where(query.whereclause) if hosts is not None else None
    for child, key, order in ((models.NumaCell, "numa_cells", "cell_id"),
                              (models.Gpu, "gpus", "pci_address"),
                              (models.GpuLink, "gpu_links", "gpu_a")):
        table = child.__table__
        children = select(table)
        if reports is not None:
            children = children.where(table.c.host_topology_id.in_(reports))
        rows = bind.execute(children.order_by(table.c.host_topology_id, table.c[order],
                                              table.c.id))
        build = {"numa_cells": _cell_document, "gpus": _gpu_document,
                 "gpu_links": _link_document}[key]
        for row in rows:
            if row.host_topology_id in documents:  # a report stored since the first read
                documents[row.host_topology_id][key].append(build(row))
    _attach_mig(bind, documents, reports)
    return {document["host"]: document for document in documents.values()}


def _header(row: Any) -> dict[str, Any]:
    """A report document's top level, children to be filled."""
    return {"host": row.host, "reported_at": row.reported_at, "collected_at": row.collected_at,
            "agent_version": row.agent_version, "driver_version": row.driver_version,
            "cuda_driver_version": row.cuda_driver_version, "nvml_error": row.nvml_error,
            "guests": row.guests, "nics": list(row.nics or ()), "numa_cells": [], "gpus": [],
            "gpu_links": []}


def _cell_document(c: Any) -> dict[str, Any]:
    """One NUMA cell of a report document."""
    return {"id": c.cell_id, "socket": c.socket, "cpus": c.cpus,
            "dedicated_cpus": c.dedicated_cpus, "shared_cpus": c.shared_cpus,
            "siblings": list(c.siblings), "memory_mb": c.memory_mb,
            "memory_usage_mb": c.memory_usage_mb, "cpu_usage": c.cpu_usage,
            "pinned_cpus": c.pinned_cpus, "mempages": list(c.mempages),
            "distances": list(c.distances)}


def _link_document(link: Any) -> dict[str, Any]:
    """One GPU pair of a report document."""
    return {"a": link.gpu_a, "b": link.gpu_b, "nvlink": link.nvlink,
            "p2p_nvlink": link.p2p_nvlink, "topology": link.topology_level}


def _gpu_document(g: Any) -> dict[str, Any]:
    """One GPU of a report document (MIG instances attached later, by ``_gpu_id``)."""
    return {
        "index": g.gpu_index, "uuid": g.uuid, "name": g.name, "pci_address": g.pci_address,
        "vendor_id": g.vendor_id, "device_id": g.device_id, "dev_type": g.dev_type,
        "driver": g.driver, "memory_mb": g.memory_mb, "numa_node": g.numa_node,
        "numa_source": g.numa_source, "pci_numa_node": g.pci_numa_node,
        "cpu_affinity": g.cpu_affinity,
        "mig": {"mode": g.mig_mode, "pending": g.mig_pending, "instances": []},
        "virtualization_mode": g.virtualization_mode,
        "compute_capability": g.compute_capability,
        "health": {"healthy": g.healthy, "reasons": list(g.health_reasons)},
        "in_use": g.in_use, "in_use_source": g.in_use_source, "vgpus_in_use": g.vgpus_in_use,
        "fabric": None if g.fabric_clique is None and g.fabric_cluster is None else {
            "clique_id": g.fabric_clique, "cluster_uuid": g.fabric_cluster},
        "unsupported": list(g.unsupported), "_gpu_id": g.id,
    }


def _attach_mig(bind: Connection | Session, documents: dict[int, dict[str, Any]],
                reports: Any = None) -> None:
    """Fill the GPUs' MIG instances and drop the internal ``_gpu_id``.

    ``reports`` is the subquery of the reports' ids (None: every report); the MIG rows
    are selected through it, not by a list of GPU ids (see :func:`read_reports`).
    """
    gpus = {g.pop("_gpu_id"): g for d in documents.values() for g in d["gpus"]}
    table, gpu_table = models.MigInstance.__table__, models.Gpu.__table__
    query = select(table).order_by(table.c.gpu_id, table.c.instance_id)
    if reports is not None:
        query = query.where(table.c.gpu_id.in_(
            select(gpu_table.c.id).where(gpu_table.c.host_topology_id.in_(reports))))
    rows = bind.execute(query) if gpus else ()
    for i in (i for i in rows if i.gpu_id in gpus):
        gpus[i.gpu_id]["mig"]["instances"].append({
            "id": i.instance_id, "profile_id": i.profile_id, "profile": i.profile,
            "placement_start": i.placement_start, "placement_size": i.placement_size,
            "memory_mb": i.memory_mb, "in_use": i.in_use})
