"""Knowledge tables and host features derived from the synced tables, and the version bump.

After Nova or Placement changed, ``compute_nodes`` and ``resource_inventories``
(the tables the API's knowledge view reads) are rebuilt from ``hypervisors`` and
the Placement provider trees:

- one compute node per hypervisor that has a Placement root provider (same
  uuid); a hypervisor Placement does not know yet stays out, so the API treats
  its host as unknown (the caller's order) instead of as a host without capacity;
  ``enabled`` is the service status, ``up`` its state (and not forced down);
- traits: the union of the traits of every provider in the node's tree, so a
  GPU trait on a PCI child provider is the host's too;
- inventories: per resource class, the root's and its descendants' (the PCI/vGPU
  children ``<node>_<pci address>``) summed: total, reserved and used add up,
  max_unit too (at most the summed total), min_unit is the smallest; where the
  providers' allocation ratios or step sizes differ, the capacity ``(total -
  reserved) * ratio`` is summed instead and stated with ratio 1 and step 1.

Host facts per compute node (:func:`node_facts`), the shape the knowledge view's
HostState reads (revision 0004's ``compute_nodes`` columns): ``features`` (the
host's Prometheus features by name, e.g. ``cpu.busy``), ``cpu_features``
(``cpu_info.features`` of the hypervisor; the whole ``cpu_info`` and ``host_ip`` are
kept as the hypervisor API gives them, ``supported_instances`` left NULL: the API does
not show them), ``instances`` (``[{uuid, project_id,
vm_state, task_state}]`` of the servers on the node) and ``migrations`` (the
in-progress migrations into or out of the host, ``resources`` empty: Nova since
Queens holds every migration's claim in Placement, on the migration record as
consumer at the source and on the instance at the destination, so Placement's
``used`` already counts it). They are stored in the columns the schema has.

Host features (``host_features``) per source, as of the source's last sync
(``observed_at`` empty; ``sync_status`` says when): Placement counts GPU devices (child
providers with PGPU, VGPU or an NVIDIA ``CUSTOM_PCI_10DE_*`` class) and those
with usage; Nova counts instances and in-progress migrations per host
(source and destination); Prometheus's come from :mod:`cortex.sync.prometheus`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from cortex.db import models
from cortex.store.commitments import follow_instances
from cortex.store.reservation_rows import delete_fulfilled
from cortex.sync.snapshot import TableCounts
from cortex.sync.source import SyncContext

GPU_CLASSES = ("PGPU", "VGPU")
NVIDIA_PCI_PREFIX = "CUSTOM_PCI_10DE_"


def is_gpu_class(resource_class: str) -> bool:
    """True for the resource classes of a GPU device: PGPU, VGPU, NVIDIA PCI (vendor 10de)."""
    return resource_class in GPU_CLASSES or resource_class.startswith(NVIDIA_PCI_PREFIX)


def refresh_compute_nodes(ctx: SyncContext) -> None:
    """Rebuild ``compute_nodes`` and ``resource_inventories`` from hypervisors and Placement."""
    conn = ctx.connection
    trees = _trees(conn)
    traits = _by_provider(conn, models.ProviderTrait.__table__, "trait")
    inventories = _by_provider(conn, models.ProviderInventory.__table__, None)
    hypervisors = [h for h in conn.execute(select(models.Hypervisor.__table__)).mappings()
                   if h["uuid"] in trees]
    facts = node_facts(conn, hypervisors)
    stored = set(models.ComputeNode.__table__.c.keys())
    ctx.replace(models.ComputeNode, ({
        **_node_row(h, trees, traits),
        **{k: v for k, v in facts[h["uuid"]].items() if k in stored}} for h in hypervisors),
        ("uuid",))
    ids = dict(conn.execute(select(models.ComputeNode.uuid, models.ComputeNode.id)).all())
    rows = []
    for hypervisor in hypervisors:
        members = trees.get(hypervisor["uuid"], ())
        for resource_class, inventory in _summed(members, inventories).items():
            rows.append({"compute_node_id": ids[hypervisor["uuid"]],
                         "resource_class": resource_class, **inventory})
    ctx.replace(models.ResourceInventory, rows, ("compute_node_id", "resource_class"))


def node_facts(conn: Connection, hypervisors) -> dict[str, dict[str, Any]]:
    """``{node uuid: {"features", "cpu_features", "instances", "migrations"}}`` (module doc).

    Lists are sorted by uuid so that an unchanged cloud writes equal JSON.
    """
    table = models.HostFeature.__table__
    features: dict[str, dict[str, float]] = defaultdict(dict)
    for host, feature, value in conn.execute(select(
            table.c.host, table.c.feature, table.c.value).where(table.c.source == "prometheus")):
        features[host][feature] = value
    servers = models.Server.__table__
    instances: dict[tuple[str, str | None], list[dict]] = defaultdict(list)
    for row in conn.execute(select(servers.c.uuid, servers.c.host, servers.c.node,
                                   servers.c.project_id, servers.c.vm_state,
                                   servers.c.task_state).order_by(servers.c.uuid)):
        instances[(row.host, row.node)].append({
            "uuid": row.uuid, "project_id": row.project_id, "vm_state": row.vm_state,
            "task_state": row.task_state})
    migrations: dict[str, list[dict]] = defaultdict(list)
    table = models.ServerMigration.__table__
    for row in conn.execute(select(table).order_by(table.c.uuid)):
        summary = {"uuid": row.uuid, "instance_uuid": row.server_uuid,
                   "source_host": row.source_compute, "dest_host": row.dest_compute,
                   "status": row.status, "resources": {}}
        for host in {row.source_compute, row.dest_compute} - {None}:
            migrations[host].append(summary)
    return {h["uuid"]: {
        "features": features.get(h["host"], {}), "cpu_features": list(h["cpu_features"] or ()),
        "instances": instances.get((h["host"], h["node"]), []) + (
            instances.get((h["host"], None), [])),
        "migrations": migrations.get(h["host"], [])} for h in hypervisors}


def _trees(conn: Connection) -> dict[str, list[str]]:
    """``{root uuid: [uuid of every provider in the tree, root first]}``."""
    table = models.ResourceProvider.__table__
    trees: dict[str, list[str]] = defaultdict(list)
    for uuid, root in conn.execute(select(table.c.uuid, table.c.root_provider_uuid)
                                   .order_by(table.c.uuid)):
        if uuid == root:
            trees[root].insert(0, uuid)
        else:
            trees[root].append(uuid)
    return trees


def _by_provider(conn: Connection, table, column: str | None) -> dict[str, list[Any]]:
    """Rows of a provider table grouped by provider (one column's values, or whole rows)."""
    grouped: dict[str, list[Any]] = defaultdict(list)
    for row in conn.execute(select(table)).mappings():
        grouped[row["provider_uuid"]].append(row[column] if column else row)
    return grouped


def _node_row(hypervisor, trees, traits) -> dict[str, Any]:
    """A compute_nodes row of one hypervisor and its provider tree's traits."""
    tree_traits = sorted({t for uuid in trees.get(hypervisor["uuid"], ()) for t in traits[uuid]})
    arch = hypervisor["cpu_arch"] or next(
        (t[len("HW_ARCH_"):].lower() for t in tree_traits if t.startswith("HW_ARCH_")), None)
    return {
        "uuid": hypervisor["uuid"], "host": hypervisor["host"], "node": hypervisor["node"],
        "availability_zone": hypervisor["zone"], "hypervisor_type": hypervisor["hypervisor_type"],
        "hypervisor_version": hypervisor["hypervisor_version"], "cpu_arch": arch,
        "enabled": hypervisor["status"] == "enabled",
        "up": hypervisor["state"] == "up" and not hypervisor["forced_down"],
        "disabled_reason": hypervisor["disabled_reason"], "traits": tree_traits,
        "cpu_info": dict(hypervisor["cpu_info"] or {}), "host_ip": hypervisor["host_ip"],
    }


def _summed(members: list[str], inventories) -> dict[str, dict[str, Any]]:
    """Per resource class, the inventories of a provider tree combined (module docstring)."""
    by_class: dict[str, list[Any]] = defaultdict(list)
    for uuid in members:
        for row in inventories[uuid]:
            by_class[row["resource_class"]].append(row)
    summed = {}
    for resource_class, rows in by_class.items():
        uniform = len({(r["allocation_ratio"], r["step_size"]) for r in rows}) == 1
        total = sum(r["total"] for r in rows) if uniform else sum(
            math.floor((r["total"] - r["reserved"]) * r["allocation_ratio"]) for r in rows)
        summed[resource_class] = {
            "total": total, "reserved": sum(r["reserved"] for r in rows) if uniform else 0,
            "min_unit": min(r["min_unit"] for r in rows),
            "max_unit": rows[0]["max_unit"] if len(rows) == 1 else min(
                sum(r["max_unit"] for r in rows), total),
            "step_size": rows[0]["step_size"] if uniform else 1,
            "allocation_ratio": rows[0]["allocation_ratio"] if uniform else 1.0,
            "used": sum(r["used"] for r in rows)}
    return summed


def replace_features(ctx: SyncContext, source: str,
                     features: dict[tuple[str, str], tuple[float, str, datetime | None]]) -> None:
    """Make ``host_features`` of ``source`` exactly ``{(host, feature): (value, unit, at)}``."""
    table = models.HostFeature.__table__
    ctx.replace(table, ({"host": host, "feature": name, "source": source, "value": value,
                         "unit": unit, "observed_at": at}
                        for (host, name), (value, unit, at) in features.items()),
                ("host", "feature"), scope=table.c.source == source)


def refresh_placement_features(ctx: SyncContext) -> None:
    """``gpu_devices`` and ``gpu_devices_allocated`` per host, from the provider trees."""
    conn = ctx.connection
    hosts = dict(conn.execute(select(models.Hypervisor.uuid, models.Hypervisor.host)).all())
    providers = models.ResourceProvider.__table__
    inventories = models.ProviderInventory.__table__
    rows = conn.execute(
        select(providers.c.uuid, providers.c.root_provider_uuid, inventories.c.resource_class,
               inventories.c.used)
        .join(inventories, inventories.c.provider_uuid == providers.c.uuid)
        .where(providers.c.uuid != providers.c.root_provider_uuid))
    devices: dict[str, dict[str, bool]] = defaultdict(dict)
    for uuid, root, resource_class, used in rows:
        if is_gpu_class(resource_class) and root in hosts:
            devices[hosts[root]][uuid] = devices[hosts[root]].get(uuid, False) or used > 0
    features = {}
    for host, by_device in devices.items():
        features[(host, "gpu_devices")] = (float(len(by_device)), "count", None)
        features[(host, "gpu_devices_allocated")] = (
            float(sum(by_device.values())), "count", None)
    replace_features(ctx, "placement", features)


def follow_commitments(ctx: SyncContext) -> None:
    """Committed holds follow the owners' instances Nova moved (:mod:`cortex.store.commitments`)."""
    changed = follow_instances(ctx.connection)
    if changed:
        ctx.count("commitment_holds", TableCounts(changed, changed, 0))


def forget_kept_promises(ctx: SyncContext) -> None:
    """In-flight reservations of instances the servers now show on a host are deleted."""
    kept = delete_fulfilled(ctx.connection)
    if kept:
        ctx.count("inflight_reservations", TableCounts(0, 0, kept))


def refresh_nova_features(ctx: SyncContext) -> None:
    """``instances`` and ``migrations_in_progress`` per host."""
    conn = ctx.connection
    instances = Counter(h for (h,) in conn.execute(select(models.Server.host)) if h)
    migrations: Counter[str] = Counter()
    for source, dest in conn.execute(select(models.ServerMigration.source_compute,
                                            models.ServerMigration.dest_compute)):
        migrations.update(h for h in {source, dest} if h)
    known = {h for (h,) in conn.execute(select(models.Hypervisor.host))}
    features = {}
    for host in known | set(instances) | set(migrations):
        features[(host, "instances")] = (float(instances[host]), "count", None)
        features[(host, "migrations_in_progress")] = (float(migrations[host]), "count", None)
    replace_features(ctx, "nova", features)
