"""Agent topology reports read back from the topology tables.

:func:`load_topologies` builds the view's HostTopology objects straight from the rows
(what the knowledge loader uses: 10,000 GPU hosts, 57,000 GPUs); :func:`read_reports`
gives back documents of the ``TopologyReport`` shape (plus ``reported_at``) for the
API, from which :func:`cortex.knowledge.topology.topology_from_report` builds the same
objects; :func:`report_times` says which reports moved. The tables are written by
:mod:`cortex.store.reports` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Text, cast, select
from sqlalchemy.orm import Session

from cortex.db import models
from cortex.db.engine import loads_json
from cortex.knowledge.topology import (
    HostTopology,
    Nic,
    gpu,
    link_map,
    mig_instance,
    numa_cell,
    replace_in_use,
)


def report_times(bind: Connection | Session) -> dict[str, datetime]:
    """``{host: reported_at}`` of every stored report (one cheap query)."""
    query = select(models.HostTopology.host, models.HostTopology.reported_at)
    return {row.host: row.reported_at for row in bind.execute(query)}


def load_topologies(bind: Connection | Session, hosts: Iterable[str] | None = None,
                    placement: Mapping[str, Mapping[str, bool]] | None = None
                    ) -> dict[str, HostTopology]:
    """``{host: HostTopology}`` of the stored reports of ``hosts`` (all when None).

    ``placement``: ``{host: {pci address: in use}}`` from Placement's child providers,
    which overrides the reports' ``in_use`` (:func:`cortex.knowledge.topology.topology_from_report`
    gives the same objects from a report document). One query per table, the rows read
    in host order and turned into objects directly, without documents: the JSON columns
    are read as text and parsed once per distinct text, and equal cells, MIG instances
    and link maps are one object (a fleet repeats a few models and usage levels).
    """
    placement = placement or {}
    tables = models.HostTopology.__table__
    query = select(tables.c.id, tables.c.host, tables.c.reported_at, tables.c.driver_version,
                   tables.c.nvml_error, cast(tables.c.nics, Text), cast(tables.c.cpu_info, Text),
                   tables.c.host_ip)
    reports = None
    if hosts is not None:
        query = query.where(tables.c.host.in_(list(hosts)))
        reports = select(tables.c.id).where(query.whereclause)
    headers = _tuples(bind, query)
    if not headers:
        return {}
    parse = TextParser()
    cells = _cells(bind, reports, parse)
    migs = _mig_instances(bind, reports)
    gpus = _gpus(bind, reports, parse, migs)
    pairs = _links(bind, reports)
    nics_of: dict[str | None, tuple[Nic, ...]] = {}
    found = {}
    for report_id, host, reported_at, driver_version, nvml_error, nics, cpu, ip in headers:
        in_use = placement.get(host)
        host_gpus = gpus.get(report_id, ())
        if in_use:
            host_gpus = tuple(replace_in_use(g, in_use) for g in host_gpus)
        if nics not in nics_of:
            nics_of[nics] = tuple(Nic(n["name"], n.get("pci_address"), n.get("numa_node"))
                                  for n in parse(nics) or ())
        found[host] = HostTopology(
            cells=cells.get(report_id, ()), gpus=host_gpus,
            links=pairs.get(report_id) or link_map(()), nics=nics_of[nics],
            reported_at=reported_at, driver_version=driver_version, nvml_error=nvml_error,
            cpu_info=dict(parse(cpu) or {}), host_ip=ip)
    return found


class TextParser:
    """JSON texts parsed once each (the same siblings, pages, reasons and traits recur).

    For one load: the parsed values are shared by every row with the same text, so
    they must not be changed.
    """

    def __init__(self) -> None:
        self._seen: dict[str | None, Any] = {}

    def __call__(self, text: str | None) -> Any:
        try:
            return self._seen[text]
        except KeyError:
            value = self._seen[text] = None if text is None else loads_json(text)
            return value


def _children(bind: Connection | Session, table: Any, columns: list, order: list,
              reports: Any) -> dict[int, list[tuple]]:
    """A child table's rows per report: ``{report id: [row, ...]}`` in ``order``.

    A row holds the ``columns``' values. On PostgreSQL the statement (SQLAlchemy's,
    compiled) runs on the session's own psycopg connection and its rows are plain
    tuples: SQLAlchemy's row objects cost more than the query for 57,000 GPUs.
    """
    key = table.c.host_topology_id
    query = select(key, *columns)
    if reports is not None:
        query = query.where(key.in_(reports))
    rows = _tuples(bind, query.order_by(key, *order))
    return {report_id: [row[1:] for row in group]
            for report_id, group in groupby(rows, key=itemgetter(0))}


def _tuples(bind: Connection | Session, query: Any) -> list[tuple]:
    """The rows of ``query`` as tuples, in ``bind``'s transaction."""
    connection = bind if isinstance(bind, Connection) else bind.connection()
    if connection.dialect.name != "postgresql":
        return [tuple(row) for row in connection.execute(query)]
    compiled = query.compile(dialect=connection.dialect,
                             compile_kwargs={"render_postcompile": True})
    raw = connection.connection.driver_connection
    return raw.execute(str(compiled), compiled.params).fetchall()


def _grouped(children: dict[int, list[tuple]], build: Callable[[tuple], Any]
             ) -> dict[int, tuple]:
    """``{report id: (build(row), ...)}`` of :func:`_children`' answer."""
    return {report_id: tuple(build(row) for row in rows)
            for report_id, rows in children.items()}


def _cells(bind: Connection | Session, reports: Any, parse: TextParser) -> dict[int, tuple]:
    """Each report's NumaCells by cell id; equal rows give one object."""
    table = models.NumaCell.__table__
    c = table.c
    rows = _children(bind, table, [
        c.cell_id, c.socket, c.cpus, c.dedicated_cpus, c.shared_cpus, cast(c.siblings, Text),
        c.memory_mb, c.memory_usage_mb, c.cpu_usage, c.pinned_cpus, cast(c.mempages, Text),
        cast(c.distances, Text)], [c.cell_id], reports)
    made: dict[tuple, Any] = {}

    def build(key: tuple) -> Any:
        found = made.get(key)
        if found is None:
            (cell_id, socket, cpus, dedicated, shared, siblings, memory, usage, cpu_usage,
             pinned, mempages, distances) = key
            found = made[key] = numa_cell(cell_id, socket, cpus, dedicated, shared,
                                          parse(siblings), memory, usage, cpu_usage, pinned,
                                          parse(mempages), parse(distances))
        return found

    return _grouped(rows, build)


def _mig_instances(bind: Connection | Session, reports: Any) -> dict[int, tuple]:
    """``{GPU row id: (MigInstance, ...)}`` by instance id."""
    table, gpu_table = models.MigInstance.__table__, models.Gpu.__table__
    c = table.c
    query = select(c.gpu_id, c.instance_id, c.profile_id, c.profile, c.placement_start,
                   c.placement_size, c.memory_mb, c.in_use)
    if reports is not None:
        query = query.where(c.gpu_id.in_(select(gpu_table.c.id).where(
            gpu_table.c.host_topology_id.in_(reports))))
    rows = _tuples(bind, query.order_by(c.gpu_id, c.instance_id))
    return {gpu_id: tuple(mig_instance(*row[1:]) for row in group)
            for gpu_id, group in groupby(rows, key=itemgetter(0))}


def _gpus(bind: Connection | Session, reports: Any, parse: TextParser,
          migs: dict[int, tuple]) -> dict[int, tuple]:
    """Each report's Gpus, sorted by PCI address (in Python: a collation may differ)."""
    table = models.Gpu.__table__
    c = table.c
    rows = _children(bind, table, [
        c.id, c.pci_address, c.vendor_id, c.device_id, c.gpu_index, c.uuid, c.name,
        c.dev_type, c.driver, c.memory_mb, c.numa_node, c.numa_source, c.pci_numa_node,
        c.cpu_affinity, c.mig_mode, c.virtualization_mode, c.compute_capability, c.healthy,
        cast(c.health_reasons, Text), c.in_use, c.in_use_source, c.vgpus_in_use,
        c.fabric_clique, c.fabric_cluster, c.instance_uuid, c.power_watts], [c.pci_address],
        reports)

    def build(row: tuple) -> Any:
        (row_id, address, vendor, device, index, uuid, name, dev_type, driver, memory,
         node, source, pci_node, affinity, mig_mode, virtualization, capability, healthy,
         reasons, in_use, in_use_source, vgpus, clique, cluster, holder, watts) = row
        return gpu(address, vendor, device, index, uuid, name, dev_type, driver, memory, node,
                   source, pci_node, affinity, mig_mode, migs.get(row_id, ()), virtualization,
                   capability, healthy, parse(reasons), in_use, in_use_source, vgpus, clique,
                   cluster, holder, watts)

    return {report_id: tuple(sorted(found, key=lambda g: g.pci_address))
            for report_id, found in _grouped(rows, build).items()}


def _links(bind: Connection | Session, reports: Any) -> dict[int, Any]:
    """Each report's link map (:func:`cortex.knowledge.topology.link_map`).

    Built from the pairs ``(a, b, nvlink, p2p_nvlink, level)`` sorted; equal pair lists
    (all the hosts of a model) give one map, built once.
    """
    table = models.GpuLink.__table__
    c = table.c
    children = _children(bind, table, [c.gpu_a, c.gpu_b, c.nvlink, c.p2p_nvlink,
                                       c.topology_level], [c.gpu_a, c.gpu_b], reports)
    maps: dict[tuple, Any] = {}
    found = {}
    for report_id, rows in children.items():
        key = tuple(rows)
        if key not in maps:
            maps[key] = link_map(tuple(sorted((a, b, int(nvlink or 0), p2p, level)
                                              for a, b, nvlink, p2p, level in rows)))
        found[report_id] = maps[key]
    return found


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
    """A report document's top level, children to be filled (``cpu_info``/``host_ip`` if any)."""
    document = {
        "host": row.host, "reported_at": row.reported_at, "collected_at": row.collected_at,
        "agent_version": row.agent_version, "driver_version": row.driver_version,
        "cuda_driver_version": row.cuda_driver_version, "nvml_error": row.nvml_error,
        "guests": row.guests, "nics": list(row.nics or ()), "numa_cells": [], "gpus": [],
        "gpu_links": []}
    if row.cpu_info:
        document["cpu_info"] = dict(row.cpu_info)
    if row.host_ip:
        document["host_ip"] = row.host_ip
    return document


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
        "power_watts": g.power_watts, "unsupported": list(g.unsupported), "_gpu_id": g.id,
    } | ({"instance_uuid": g.instance_uuid} if g.instance_uuid else {})


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
