"""Agent topology reports read back from the topology tables as report documents.

:func:`read_reports` gives back documents of the ``TopologyReport`` shape (plus
``reported_at``), from which :func:`cortex.knowledge.topology.topology_from_report`
builds the view; :func:`report_times` says which reports moved. The tables are written
by :mod:`cortex.store.reports` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from cortex.db import models


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
