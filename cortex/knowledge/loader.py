"""Build a KnowledgeView from the knowledge tables (a handful of queries, no per-host ones)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.orm import Session, selectinload

from cortex.db import models
from cortex.knowledge.network import (
    SOURCE_FILE,
    SOURCE_PROMETHEUS,
    MetadataKeys,
    build_topology,
)
from cortex.knowledge.reports import read_reports, report_times
from cortex.knowledge.topology import HostTopology, placement_gpu_usage, topology_from_report
from cortex.knowledge.view import (
    Aggregate,
    HostState,
    InstanceSummary,
    Inventory,
    KnowledgeView,
    MigrationSummary,
    NodeState,
    StoragePoolState,
)

_IN_LIST_LIMIT = 500  # more changed hosts than this: read all reports at once


def read_version(bind: Engine | Connection) -> int:
    """The current knowledge version (0 for a freshly migrated database)."""
    query = select(models.KnowledgeVersion.version).where(models.KnowledgeVersion.id == 1)
    if isinstance(bind, Connection):
        return int(bind.execute(query).scalar() or 0)
    with bind.connect() as connection:
        return int(connection.execute(query).scalar() or 0)


def load_view(bind: Engine | Connection, previous: KnowledgeView | None = None,
              network_keys: MetadataKeys | None = None) -> KnowledgeView:
    """Read every knowledge table in one transaction and freeze the result.

    ``network_keys`` are the aggregate metadata keys of the network location
    (``[network]`` options; default ``topology:leaf`` etc.); aggregates place hosts
    before the stored file and Prometheus locations (:func:`build_topology`).
    ``bind`` may be a Connection inside the caller's transaction (tests). Hosts whose
    topology report is still the one ``previous`` (the view being replaced) holds keep
    that HostTopology; only new or changed reports are read and built again.
    """
    with Session(bind) as session, session.begin_nested() if isinstance(
            bind, Connection) else session.begin():
        version = session.execute(
            select(models.KnowledgeVersion.version).where(models.KnowledgeVersion.id == 1)
        ).scalar() or 0
        aggregates = session.scalars(
            select(models.Aggregate).options(selectinload(models.Aggregate.hosts))).all()
        nodes = session.scalars(
            select(models.ComputeNode).options(selectinload(models.ComputeNode.inventories))
        ).all()
        pools = session.scalars(select(models.StoragePool)).all()
        topologies = _topologies(session, {row.host for row in nodes}, nodes, previous)
        by_host = _aggregates_by_host(aggregates)
        stored = read_topologies(session)
        return KnowledgeView(
            version=int(version),
            loaded_at=datetime.now(UTC),
            hosts=_hosts(nodes, by_host, topologies),
            pools=_pools(pools),
            network=build_topology(by_host, stored.get(SOURCE_FILE),
                                   network_keys or MetadataKeys(),
                                   stored.get(SOURCE_PROMETHEUS)),
        )


def _aggregates_by_host(rows) -> dict[str, list[Aggregate]]:
    """``{host: [Aggregate]}`` from aggregate rows with their members loaded."""
    by_host: dict[str, list[Aggregate]] = defaultdict(list)
    for row in rows:
        aggregate = Aggregate(row.uuid, row.name, row.availability_zone,
                              MappingProxyType(dict(row.metadata_ or {})))
        for member in row.hosts:
            by_host[member.host].append(aggregate)
    return by_host


def _node(row: models.ComputeNode) -> NodeState:
    """NodeState of one compute node row and its inventories."""
    inventories = {
        inv.resource_class: Inventory(
            total=inv.total, reserved=inv.reserved, min_unit=inv.min_unit,
            max_unit=inv.max_unit, step_size=inv.step_size,
            allocation_ratio=inv.allocation_ratio, used=inv.used)
        for inv in row.inventories}
    return NodeState(row.node, row.uuid, row.hypervisor_type, row.hypervisor_version,
                     row.cpu_arch, frozenset(row.traits or ()), MappingProxyType(inventories))


def _topologies(session: Session, hosts: set[str], nodes,
                previous: KnowledgeView | None) -> dict[str, HostTopology]:
    """The HostTopology of each of ``hosts`` that has a report, reusing ``previous``'s.

    GPUs' ``in_use`` comes from the reports (agent or fleet), overridden by Placement's
    PCI and vGPU child providers (synced by cortex-sync) joined by PCI address with
    :func:`cortex.knowledge.topology.placement_gpu_usage`. A previous topology is reused
    only when its report is unchanged and Placement tracks none of the host's devices
    (Placement usage moves without a new report).
    """
    placement = _placement_gpu_usage(session, nodes)
    times = {host: at for host, at in report_times(session).items() if host in hosts}
    kept: dict[str, HostTopology] = {}
    for host, at in times.items():
        state = previous.hosts.get(host) if previous is not None else None
        if state is not None and state.topology is not None \
                and state.topology.reported_at == at and host not in placement:
            kept[host] = state.topology
    stale = [host for host in times if host not in kept]
    if stale:
        documents = read_reports(session, stale if len(stale) <= _IN_LIST_LIMIT else None)
        kept.update({host: topology_from_report(documents[host], documents[host]["reported_at"],
                                                placement.get(host))
                     for host in stale})
    return kept


def _placement_gpu_usage(session: Session, nodes) -> dict[str, dict[str, bool]]:
    """``{host: {pci address: in use}}`` from synced Placement child providers.

    A compute node's uuid is its root provider's; children named ``<node>_<pci address>``
    (PCI in Placement) or ``<node>_pci_<address>`` (vGPU parents) carry the usage.
    """
    by_root = {row.uuid: (row.host, row.node) for row in nodes}
    used = (select(models.ProviderInventory.provider_uuid,
                   func.sum(models.ProviderInventory.used).label("used"))
            .group_by(models.ProviderInventory.provider_uuid).subquery())
    rows = session.execute(
        select(models.ResourceProvider.root_provider_uuid, models.ResourceProvider.name,
               func.coalesce(used.c.used, 0))
        .outerjoin(used, used.c.provider_uuid == models.ResourceProvider.uuid)
        .where(models.ResourceProvider.parent_provider_uuid.is_not(None)))
    children: dict[str, list[tuple[str, int]]] = {}
    for root, name, amount in rows:
        if root in by_root:
            children.setdefault(root, []).append((name, int(amount)))
    usage: dict[str, dict[str, bool]] = {}
    for root, providers in children.items():
        host, node = by_root[root]
        found = placement_gpu_usage(node, providers)
        if found:
            usage.setdefault(host, {}).update(found)
    return usage


def _hosts(nodes, aggregates: dict[str, list[Aggregate]],
           topologies: dict[str, HostTopology] | None = None) -> MappingProxyType:
    """Group node rows by host; a host is enabled/up only if all its nodes' services are."""
    rows_by_host = defaultdict(list)
    for row in nodes:
        rows_by_host[row.host].append(row)
    hosts = {}
    for host, rows in rows_by_host.items():
        node_states = {row.node: _node(row) for row in rows}
        zone = next((r.availability_zone for r in rows if r.availability_zone), None)
        if zone is None:
            zone = next((a.availability_zone for a in aggregates.get(host, ())
                         if a.availability_zone), None)
        hosts[host] = HostState(
            host=host, availability_zone=zone,
            enabled=all(r.enabled for r in rows), up=all(r.up for r in rows),
            disabled_reason=next((r.disabled_reason for r in rows if r.disabled_reason), None),
            aggregates=tuple(aggregates.get(host, ())),
            nodes=MappingProxyType(node_states),
            traits=frozenset().union(*(n.traits for n in node_states.values())),
            **_host_facts(rows),
            topology=(topologies or {}).get(host),
        )
    return MappingProxyType(hosts)


def _host_facts(rows) -> dict:
    """The syncers' host facts of a host's node rows (see ComputeNode).

    Features merge over the nodes; CPU features are those every node has; instances
    and migrations are listed once each; failed builds add up; allowed projects unite.
    """
    features: dict[str, float] = {}
    instances: dict[str, InstanceSummary] = {}
    migrations: dict[str, MigrationSummary] = {}
    for row in rows:
        features.update({k: float(v) for k, v in (row.features or {}).items()})
        for item in row.instances or ():
            instances.setdefault(item["uuid"], InstanceSummary(
                item["uuid"], item.get("project_id"), item.get("vm_state"),
                item.get("task_state"), float(item.get("cpu_busy") or 0.0)))
        for item in row.migrations or ():
            migrations.setdefault(item["uuid"], MigrationSummary(
                item["uuid"], item.get("instance_uuid"), item.get("source_host"),
                item.get("dest_host"), item["status"],
                MappingProxyType(dict(item.get("resources") or {}))))
    return {
        "features": MappingProxyType(features),
        "cpu_features": frozenset.intersection(
            *(frozenset(r.cpu_features or ()) for r in rows)),
        "instances": tuple(instances.values()),
        "migrations": tuple(migrations.values()),
        "failed_builds": sum(r.failed_builds or 0 for r in rows),
        "allowed_projects": frozenset().union(*(r.allowed_projects or () for r in rows)),
    }


def _pools(rows) -> MappingProxyType:
    """``{service: {name: StoragePoolState}}`` from storage pool rows."""
    by_service: dict[str, dict[str, StoragePoolState]] = defaultdict(dict)
    for r in rows:
        by_service[r.service][r.name] = StoragePoolState(
            r.name, r.availability_zone, r.total_capacity_gb, r.free_capacity_gb,
            r.allocated_capacity_gb, r.provisioned_capacity_gb, r.reserved_percentage,
            r.max_over_subscription_ratio, r.thin_provisioning_support,
            r.thick_provisioning_support, MappingProxyType(dict(r.capabilities or {})),
            MappingProxyType({k: float(v) for k, v in (r.features or {}).items()}),
            r.resource_count or 0)
    return MappingProxyType({k: MappingProxyType(v) for k, v in by_service.items()})


def read_topologies(session: Session) -> dict[str, dict[str, Any]]:
    """The stored domains and locations by source, each as a parse_topology-shaped document.

    ``{source: {"spines": {name: {"uplink_gbps"}}, "leaves": {name: {...,"hosts"}}}}``
    (``file``, ``prometheus``; a source with no rows is absent). A source's locations
    on a leaf another source defines appear under that leaf with only their hosts.
    """
    documents: dict[str, dict[str, Any]] = {}

    def document(source: str) -> dict[str, Any]:
        return documents.setdefault(source, {"spines": {}, "leaves": {}})

    for row in session.scalars(select(models.NetworkDomain)).all():
        if row.kind == "spine":
            document(row.source)["spines"][row.name] = {"uplink_gbps": row.uplink_gbps}
            continue
        leaf: dict[str, Any] = {"hosts": []}
        for key in ("spine", "block", "uplink_gbps", "adjacent"):
            if getattr(row, key) is not None:
                leaf[key] = getattr(row, key)
        document(row.source)["leaves"][row.name] = leaf
    for row in session.scalars(select(models.NetworkLocation)
                               .order_by(models.NetworkLocation.host)).all():
        leaves = document(row.source)["leaves"]
        leaves.setdefault(row.leaf, {"hosts": []})["hosts"].append(row.host)
    return documents
