"""Build a KnowledgeView from the knowledge tables (a handful of queries, no per-host ones).

One bad row never takes the view down: a row the load cannot read (a time beyond
Python's years 1..9999, a JSON fact of the wrong shape, a missing key) is left out,
counted per table in the view's ``skipped_rows`` and logged with its key, and the view
is built from the rest (:class:`Skips`). The write paths bound what they store so that
no such row is written; this is for rows written by hand or by an older release.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from itertools import groupby
from operator import itemgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, Text, cast, func, select
from sqlalchemy.orm import Session, selectinload

from cortex.db import models
from cortex.knowledge.commitments import Commitment, Hold
from cortex.knowledge.gpu_names import ANY_MODEL
from cortex.knowledge.network import (
    SOURCE_FILE,
    SOURCE_PROMETHEUS,
    MetadataKeys,
    build_topology,
)
from cortex.knowledge.reports import TextParser, load_topologies, report_times
from cortex.knowledge.topology import HostTopology, placement_gpu_usage
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
LOG = logging.getLogger(__name__)
#: What reading a row can raise when a stored value is not what the reader expects.
ROW_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError)


class Skips:
    """The rows one load left out: ``counts`` ``{table: rows}``, each logged with its key."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def skip(self, table: str, key: object, error: BaseException) -> None:
        """Count a row of ``table`` that could not be read and log it (WARNING)."""
        self.counts[table] = self.counts.get(table, 0) + 1
        LOG.warning("knowledge load: %s row %s skipped: %s: %s", table, key,
                    type(error).__name__, str(error)[:200])


def read_version(bind: Engine | Connection) -> int:
    """The current knowledge version (0 for a freshly migrated database)."""
    query = select(models.KnowledgeVersion.version).where(models.KnowledgeVersion.id == 1)
    if isinstance(bind, Connection):
        return int(bind.execute(query).scalar() or 0)
    with bind.connect() as connection:
        return int(connection.execute(query).scalar() or 0)


def load_view(bind: Engine | Connection, previous: KnowledgeView | None = None,
              network_keys: MetadataKeys | None = None,
              kubernetes_nodes: bool = False, request_sizes: bool = False) -> KnowledgeView:
    """Read every knowledge table in one transaction and freeze the result.

    On PostgreSQL the transaction reads one snapshot (``REPEATABLE READ``):
    the version and every row are as one commit left them, never half of a report or a
    sync written while the view was read.

    ``network_keys`` are the aggregate metadata keys of the network location
    (``[network]`` options; default ``topology:leaf`` etc.); aggregates place hosts
    before the stored file and Prometheus locations (:func:`build_topology`).
    ``bind`` may be a Connection inside the caller's transaction (tests). Hosts whose
    topology report is still the one ``previous`` (the view being replaced) holds keep
    that HostTopology; only new or changed reports are read and built again.
    ``kubernetes_nodes`` (``[kubernetes] nodes_from_reports``): hosts whose agent reports
    but that Nova does not know join the hosts as Kubernetes nodes; otherwise their
    reports stay out of the view. ``request_sizes``: count the recorded GPU creates'
    sizes and models (:func:`read_request_sizes`, :func:`read_model_demand`, for a
    pipeline whose fragmentation weigher has ``sizes_from: demand`` or that weighs with
    ``weigher_gpu_model_reserve``); otherwise ``gpu_request_sizes`` and
    ``gpu_model_demand`` stay empty and the demand table is not read.

    The garbage collector is paused while the view is built: the million objects of a
    10,000-host view would otherwise be traversed by the full collections their own
    allocations set off (1.9 instead of 3 s). Nothing the load makes is a cycle; the
    knowledge cache collects and freezes once the view is in place
    (:func:`cortex.knowledge.cache.settle_garbage_collector`).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load_view(bind, previous, network_keys, kubernetes_nodes, request_sizes)
    finally:
        if enabled:
            gc.enable()


def _load_view(bind: Engine | Connection, previous: KnowledgeView | None,
               network_keys: MetadataKeys | None, kubernetes_nodes: bool,
               request_sizes: bool = False) -> KnowledgeView:
    """:func:`load_view`, with the collector paused."""
    skips = Skips()
    if isinstance(bind, Engine) and bind.dialect.name == "postgresql":
        # one snapshot for every statement: under READ COMMITTED a report replaced between
        # two of them would leave its host with the new header and none of its GPUs
        bind = bind.execution_options(isolation_level="REPEATABLE READ")
    with Session(bind) as session, session.begin_nested() if isinstance(
            bind, Connection) else session.begin():
        version = session.execute(
            select(models.KnowledgeVersion.version).where(models.KnowledgeVersion.id == 1)
        ).scalar() or 0
        aggregates = session.scalars(
            select(models.Aggregate).options(selectinload(models.Aggregate.hosts))).all()
        nodes = _nodes(session, skips)
        pools = session.scalars(select(models.StoragePool)).all()
        topologies = _topologies(
            session, None if kubernetes_nodes else {row.host for row in nodes}, nodes, previous)
        by_host = _aggregates_by_host(aggregates, skips)
        stored = read_topologies(session)
        commitments = read_commitments(session, skips)
        sizes = read_request_sizes(session) if request_sizes else MappingProxyType({})
        by_model = read_model_demand(session) if request_sizes else MappingProxyType({})
        return KnowledgeView(
            version=int(version),
            loaded_at=datetime.now(UTC),
            hosts=_hosts(nodes, by_host, topologies, _kubernetes_labels(session)
                         if kubernetes_nodes else None),
            pools=_pools(pools, skips),
            network=build_topology(by_host, stored.get(SOURCE_FILE),
                                   network_keys or MetadataKeys(),
                                   stored.get(SOURCE_PROMETHEUS)),
            commitments=commitments,
            gpu_request_sizes=sizes,
            gpu_model_demand=by_model,
            skipped_rows=MappingProxyType(skips.counts),
        )


#: Days of recorded GPU creates the view's ``gpu_request_sizes`` count.
REQUEST_SIZES_DAYS = 28.0


def read_request_sizes(session: Session, days: float = REQUEST_SIZES_DAYS
                       ) -> MappingProxyType:
    """``{whole GPUs per instance: creates}`` of the last ``days`` of ``gpu_demand``.

    One ``GROUP BY`` over the indexed time (a row per distinct GPUs and instances).
    """
    table = models.GpuDemand
    since = datetime.now(UTC) - timedelta(days=days)
    counts: dict[int, int] = {}
    for gpus, instances, count in session.execute(
            select(table.gpus, table.instances, func.count())
            .where(table.created_at >= since, table.gpus > 0)
            .group_by(table.gpus, table.instances)):
        size = max(1, gpus // max(1, instances))
        counts[size] = counts.get(size, 0) + int(count)
    return MappingProxyType(dict(sorted(counts.items())))


def read_model_demand(session: Session, days: float = REQUEST_SIZES_DAYS
                      ) -> MappingProxyType:
    """``{GPU model: whole GPUs}`` asked by the last ``days`` of ``gpu_demand``.

    Creates that named their model (``model_named``) count against it, the others
    under ``any`` (:data:`cortex.knowledge.gpu_names.ANY_MODEL`), placed and refused
    alike. vGPU creates are not counted: the log holds their vGPUs, not the share of a
    GPU each takes. One ``GROUP BY`` over the indexed time.
    """
    table = models.GpuDemand
    since = datetime.now(UTC) - timedelta(days=days)
    demand: dict[str, float] = {}
    for model, named, gpus in session.execute(
            select(table.model, table.model_named, func.sum(table.gpus))
            .where(table.created_at >= since, table.gpus > 0)
            .group_by(table.model, table.model_named)):
        key = model if named else ANY_MODEL
        demand[key] = demand.get(key, 0.0) + float(gpus or 0)
    return MappingProxyType(dict(sorted(demand.items())))


#: The well-known label of a Kubernetes node's zone.
ZONE_LABEL = "topology.kubernetes.io/zone"
#: The hypervisor type of a Kubernetes node's one node: what tells it from Nova's hosts.
KUBERNETES = "kubernetes"


def _kubernetes_labels(session: Session) -> dict[str, dict[str, str]]:
    """``{node: labels}`` the extender stored (:mod:`cortex.store.kubernetes`)."""
    table = models.KubernetesNode.__table__
    return {row.name: dict(row.labels or {}) for row in session.execute(
        select(table.c.name, table.c.labels))}


def read_commitments(session: Session, skips: Skips | None = None
                     ) -> tuple[Commitment, ...]:
    """Every commitment with its holds (expired ones too: they hold nothing).

    A row that cannot be read is left out (``skips``, default: a new one); a commitment
    with a hold that cannot be read is left out whole, as a commitment without a hold
    would promise less than it says.
    """
    skips = skips or Skips()
    holds: dict[str, list[Hold]] = {}
    broken: set[str] = set()
    table = models.CommitmentHold.__table__
    for row in session.execute(select(table).order_by(table.c.id)):
        try:
            holds.setdefault(row.commitment_id, []).append(Hold(
                row.id, row.commitment_id, _text(row.host),
                MappingProxyType({_text(k): int(v) for k, v in dict(row.resources).items()}),
                tuple(_text(g) for g in row.gpus), int(row.baseline), row.instance_uuid))
        except ROW_ERRORS as error:
            skips.skip("commitment_holds", row.id, error)
            broken.add(row.commitment_id)
    table = models.Commitment.__table__
    found = []
    for row in session.execute(select(table).order_by(table.c.created_at, table.c.id)):
        try:
            if row.id in broken:
                raise ValueError("one of its holds could not be read")
            found.append(Commitment(
                row.id, row.project_id, row.availability_zone, row.vcpus, row.memory_mb,
                row.gpus, tuple(_text(p) for p in row.products), row.count,
                _utc(row.start_at), _utc(row.end_at), _utc(row.created_at),
                row.description, tuple(holds.get(row.id, ()))))
        except ROW_ERRORS as error:
            skips.skip("commitments", row.id, error)
    return tuple(found)


def _utc(value: object) -> datetime:
    """A stored time as timezone-aware UTC (SQLite hands back naive times).

    TypeError for what is not a time: a NULL, or a time beyond Python's years
    (:class:`cortex.db.engine.UnreadableTime`).
    """
    if not isinstance(value, datetime):
        raise TypeError(f"not a time: {value!r}")
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _text(value: object) -> str:
    """A stored JSON string; TypeError for another JSON value."""
    if not isinstance(value, str):
        raise TypeError(f"not a string: {value!r}")
    return value


def _aggregates_by_host(rows, skips: Skips) -> dict[str, list[Aggregate]]:
    """``{host: [Aggregate]}`` from aggregate rows with their members loaded.

    An aggregate whose metadata is not a JSON object is left out (``skips``).
    """
    by_host: dict[str, list[Aggregate]] = defaultdict(list)
    for row in rows:
        try:
            aggregate = Aggregate(row.uuid, row.name, row.availability_zone,
                                  MappingProxyType(dict(row.metadata_ or {})))
        except ROW_ERRORS as error:
            skips.skip("aggregates", row.uuid, error)
            continue
        for member in row.hosts:
            by_host[member.host].append(aggregate)
    return by_host


class _NodeRow(NamedTuple):
    """A ``compute_nodes`` row with its JSON columns parsed and its inventories.

    ``features`` ``{name: float}``, ``instances`` and ``migrations`` the summaries of
    the row's own JSON (:func:`_row_facts`).
    """

    host: str
    node: str
    uuid: str
    availability_zone: str | None
    hypervisor_type: str | None
    hypervisor_version: int | None
    cpu_arch: str | None
    enabled: bool
    up: bool
    disabled_reason: str | None
    traits: frozenset[str]
    features: dict[str, float]
    instances: tuple[InstanceSummary, ...]
    migrations: tuple[MigrationSummary, ...]
    cpu_features: frozenset[str]
    failed_builds: int
    allowed_projects: frozenset[str]
    inventories: MappingProxyType
    cpu_info: dict = {}
    host_ip: str | None = None
    supported_instances: tuple[tuple[str, str, str], ...] | None = None


def _nodes(session: Session, skips: Skips) -> list[_NodeRow]:
    """Every compute node with its inventories, in two queries.

    Core queries, not ORM objects (a 10,000-host fleet has 50,000 inventories); JSON
    columns read as text and parsed once per distinct text; equal inventories are one
    Inventory object. A node whose facts cannot be read is left out (``skips``): its
    host is then one Cortex does not know, as before its first sync.
    """
    c = models.ComputeNode.__table__.c
    i = models.ResourceInventory.__table__.c
    stock = session.execute(select(
        i.compute_node_id, i.resource_class, i.total, i.reserved, i.min_unit, i.max_unit,
        i.step_size, i.allocation_ratio, i.used).order_by(i.compute_node_id)).all()
    made: dict[tuple, Inventory] = {}

    def inventory(row: tuple) -> tuple[str, Inventory]:
        key = tuple(row[2:])
        found = made.get(key)
        if found is None:
            found = made[key] = Inventory(*key)
        return row[1], found

    inventories = {node_id: MappingProxyType(dict(inventory(row) for row in rows))
                   for node_id, rows in groupby(stock, key=itemgetter(0))}
    parse = TextParser()
    traits: dict[str | None, frozenset[str]] = {}
    found = []
    for row in session.execute(select(
            c.id, c.host, c.node, c.uuid, c.availability_zone, c.hypervisor_type,
            c.hypervisor_version, c.cpu_arch, c.enabled, c.up, c.disabled_reason,
            cast(c.traits, Text), cast(c.features, Text), cast(c.cpu_features, Text),
            cast(c.instances, Text), cast(c.migrations, Text), c.failed_builds,
            cast(c.allowed_projects, Text), cast(c.cpu_info, Text), c.host_ip,
            cast(c.supported_instances, Text)).order_by(c.id)).all():
        try:
            trait_text = row[11]
            if trait_text not in traits:
                traits[trait_text] = frozenset(parse(trait_text) or ())
            found.append(_NodeRow(
                *row[1:11], traits[trait_text],
                *_row_facts(parse(row[12]), parse(row[14]), parse(row[15])),
                frozenset(parse(row[13]) or ()), row[16] or 0,
                frozenset(parse(row[17]) or ()), inventories.get(row[0], MappingProxyType({})),
                *_hypervisor_facts(parse(row[18]), row[19], parse(row[20]))))
        except ROW_ERRORS as error:
            skips.skip("compute_nodes", f"{row[1]}/{row[2]}", error)
    return found


def _row_facts(features: Any, instances: Any, migrations: Any
               ) -> tuple[dict[str, float], tuple, tuple]:
    """A node row's features, instances and migrations as the view holds them.

    Raises what :data:`ROW_ERRORS` names for JSON of another shape (an instance
    without ``uuid``, a feature that is not a number).
    """
    return ({_text(k): float(v) for k, v in (features or {}).items()},
            tuple(InstanceSummary(item["uuid"], item.get("project_id"), item.get("vm_state"),
                                  item.get("task_state"), float(item.get("cpu_busy") or 0.0))
                  for item in instances or ()),
            tuple(MigrationSummary(item["uuid"], item.get("instance_uuid"),
                                   item.get("source_host"), item.get("dest_host"),
                                   item["status"],
                                   MappingProxyType(dict(item.get("resources") or {})))
                  for item in migrations or ()))


def _with_agent_facts(node: NodeState, topology: HostTopology | None) -> NodeState:
    """``node`` with the agent's ``cpu_info``/``host_ip`` where the sync gave none."""
    if topology is None:
        return node
    facts = {}
    if not node.cpu_info and topology.cpu_info:
        facts["cpu_info"] = dict(topology.cpu_info)
    if not node.host_ip and topology.host_ip:
        facts["host_ip"] = topology.host_ip
    return dataclasses.replace(node, **facts) if facts else node


def _hypervisor_facts(cpu_info: Any, host_ip: str | None, supported: Any
                      ) -> tuple[dict, str | None, tuple | None]:
    """A node row's ``cpu_info`` (an object), ``host_ip`` and ``supported_instances``.

    Raises what :data:`ROW_ERRORS` names for JSON of another shape (a triple that is
    not three items).
    """
    if not isinstance(cpu_info or {}, dict):
        raise TypeError(f"cpu_info is not an object: {cpu_info!r:.60}")
    triples = None if supported is None else tuple(
        (_text(a), _text(h), _text(m)) for a, h, m in supported)
    return dict(cpu_info or {}), host_ip, triples


def _node(row: _NodeRow) -> NodeState:
    """NodeState of one compute node row and its inventories."""
    return NodeState(row.node, row.uuid, row.hypervisor_type, row.hypervisor_version,
                     row.cpu_arch, row.traits, row.inventories, row.cpu_info, row.host_ip,
                     row.supported_instances)


def _topologies(session: Session, hosts: set[str] | None, nodes,
                previous: KnowledgeView | None) -> dict[str, HostTopology]:
    """The HostTopology of each of ``hosts`` (None: all) with a report, reusing ``previous``'s.

    GPUs' ``in_use`` comes from the reports (agent or fleet), overridden by Placement's
    PCI and vGPU child providers (synced by cortex-sync) joined by PCI address with
    :func:`cortex.knowledge.topology.placement_gpu_usage`. A previous topology is reused
    only when its report is unchanged and Placement tracks none of the host's devices
    (Placement usage moves without a new report).
    """
    placement = _placement_gpu_usage(session, nodes)
    times = {host: at for host, at in report_times(session).items()
             if hosts is None or host in hosts}
    kept: dict[str, HostTopology] = {}
    for host, at in times.items():
        state = previous.hosts.get(host) if previous is not None else None
        if state is not None and state.topology is not None \
                and state.topology.reported_at == at and host not in placement:
            kept[host] = state.topology
    stale = [host for host in times if host not in kept]
    if stale:
        built = load_topologies(session, stale if len(stale) <= _IN_LIST_LIMIT else None,
                                placement)
        kept.update({host: built[host] for host in stale if host in built})
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
           topologies: dict[str, HostTopology] | None = None,
           kubernetes_nodes: Mapping[str, Mapping[str, str]] | None = None) -> MappingProxyType:
    """Group node rows by host; a host is enabled/up only if all its nodes' services are.

    ``kubernetes_nodes`` (``{node: labels}``; None: none): a host whose cortex-agent
    reports but that Nova does not know is a Kubernetes node (the extender's,
    :mod:`cortex.services.kubernetes`), see :func:`_kubernetes_node`.
    """
    rows_by_host = defaultdict(list)
    for row in nodes:
        rows_by_host[row.host].append(row)
    hosts = {}
    for host, rows in rows_by_host.items():
        topology = (topologies or {}).get(host)
        node_states = {row.node: _with_agent_facts(_node(row), topology) for row in rows}
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
            topology=topology,
        )
    if kubernetes_nodes is not None:
        for host, topology in (topologies or {}).items():
            if host not in hosts:
                hosts[host] = _kubernetes_node(host, topology, kubernetes_nodes.get(host, {}))
    return MappingProxyType(hosts)


def _kubernetes_node(name: str, topology: HostTopology, labels: Mapping[str, str]
                     ) -> HostState:
    """The HostState of a Kubernetes node known by its agent's report and its labels.

    Enabled and up, in the zone of its ``topology.kubernetes.io/zone`` label, its one
    node of hypervisor type :data:`KUBERNETES`. That node's VCPU and MEMORY_MB
    inventories are the report's CPUs and memory (MiB) with the guests' usage, so the
    rules that weigh what feeds a GPU, and the in-flight reservations of the pods bound
    there, count them as on a compute node.
    """
    cpus = sum(len(c.cpus) for c in topology.cells)
    memory = sum(c.memory for c in topology.cells)
    inventories = {}
    if cpus:
        inventories["VCPU"] = Inventory(cpus, max_unit=cpus, used=sum(
            c.cpu_usage + len(c.pinned_cpus) for c in topology.cells))
    if memory:
        inventories["MEMORY_MB"] = Inventory(memory, max_unit=memory,
                                             used=sum(c.memory_usage for c in topology.cells))
    node = NodeState(name, name, KUBERNETES, None, None, frozenset(), MappingProxyType(inventories))
    return HostState(host=name, availability_zone=labels.get(ZONE_LABEL), enabled=True,
                     up=True, disabled_reason=None, aggregates=(),
                     nodes=MappingProxyType({name: node}), traits=frozenset(),
                     topology=topology, labels=MappingProxyType(dict(labels)))


def _host_facts(rows) -> dict:
    """The syncers' host facts of a host's node rows (see ComputeNode).

    Features merge over the nodes; CPU features are those every node has; instances
    and migrations are listed once each; failed builds add up; allowed projects unite.
    """
    features: dict[str, float] = {}
    instances: dict[str, InstanceSummary] = {}
    migrations: dict[str, MigrationSummary] = {}
    for row in rows:
        features.update(row.features)
        for instance in row.instances:
            instances.setdefault(instance.uuid, instance)
        for migration in row.migrations:
            migrations.setdefault(migration.uuid, migration)
    return {
        "features": MappingProxyType(features),
        "cpu_features": frozenset.intersection(*(r.cpu_features for r in rows)),
        "instances": tuple(instances.values()),
        "migrations": tuple(migrations.values()),
        "failed_builds": sum(r.failed_builds for r in rows),
        "allowed_projects": frozenset().union(*(r.allowed_projects for r in rows)),
    }


def _pools(rows, skips: Skips) -> MappingProxyType:
    """``{service: {name: StoragePoolState}}`` from storage pool rows (unreadable: skipped)."""
    by_service: dict[str, dict[str, StoragePoolState]] = defaultdict(dict)
    for r in rows:
        try:
            by_service[r.service][r.name] = StoragePoolState(
                r.name, r.availability_zone, r.total_capacity_gb, r.free_capacity_gb,
                r.allocated_capacity_gb, r.provisioned_capacity_gb, r.reserved_percentage,
                r.max_over_subscription_ratio, r.thin_provisioning_support,
                r.thick_provisioning_support, MappingProxyType(dict(r.capabilities or {})),
                MappingProxyType({_text(k): float(v) for k, v in (r.features or {}).items()}),
                r.resource_count or 0, r.availability_zone_id)
        except ROW_ERRORS as error:
            skips.skip("storage_pools", f"{r.service}/{r.name}", error)
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
