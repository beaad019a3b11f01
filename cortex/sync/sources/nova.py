"""Nova: compute services and hypervisors, servers, flavors, aggregates, server groups, migrations.

Read at the highest compute microversion both sides support, at least 2.53
(uuid ids of hypervisors and services). Field meanings are Nova's API reference:
servers carry their flavor inline (>= 2.47) with its extra specs, flavors list
extra specs inline (>= 2.61), server groups have one ``policy`` and ``rules``
(>= 2.64), migrations have uuids and pages (>= 2.59). Capacity does not come
from here (hypervisor usage fields are gone since 2.88): Placement has it.
Servers are written page by page as they arrive, inside the run's transaction;
between full reads only the servers Nova changed are read (:mod:`cortex.sync.changes`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from cortex.db import models
from cortex.sync import changes
from cortex.sync.openstack import get_json, get_json_dated, negotiate, offset_pages, pages
from cortex.sync.source import Source, SyncContext

WANTED_MICROVERSION = "2.100"
MINIMUM_MICROVERSION = "2.53"
# Nova's migration statuses after which a migration holds no resources any more
# (nova/db/main/api.py, migration_get_in_progress_by_host_and_node).
FINISHED_MIGRATION_STATUSES = frozenset(
    {"accepted", "confirmed", "reverted", "error", "failed", "completed", "cancelled", "done"})


def parse_time(value: str | None) -> datetime | None:
    """An ISO 8601 time of the API (``...Z`` or naive, which Nova means as UTC)."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class NovaSource(Source):
    """Sync Nova through ``cloud().compute`` (an openstacksdk proxy)."""

    name = "nova"

    def __init__(self, cloud: Callable[[], Any], full_interval: float = 0.0,
                 overlap: float = 300.0) -> None:
        self._cloud = cloud
        self._full_interval = full_interval
        self._overlap = overlap

    def sync(self, ctx: SyncContext) -> None:
        """Write every Nova table and the aggregates.

        Servers are read whole on a full run and as Nova's ``changes-since`` in
        between (:mod:`cortex.sync.changes`); the other lists are small and read
        whole every run.
        """
        compute = self._cloud().compute
        version = negotiate(compute, WANTED_MICROVERSION, MINIMUM_MICROVERSION)
        ctx.detail["microversion"] = version
        window = changes.plan(ctx, self._full_interval, self._overlap)
        began = _sync_hypervisors(ctx, compute, version)
        if window.full:
            servers = ctx.snapshot(models.Server, ("uuid",))
            for page in pages(compute, "/servers/detail", "servers", version,
                              {"all_tenants": 1}):
                servers.add(_server_row(s) for s in page)
            servers.finish()
        else:
            _sync_changed_servers(ctx, compute, version, window.since_param())
        flavors = [f for page in pages(compute, "/flavors/detail", "flavors", version,
                                       {"is_public": "None"}) for f in page]
        ctx.replace(models.Flavor, (_flavor_row(compute, version, f) for f in flavors), ("id",))
        groups = [g for page in offset_pages(compute, "/os-server-groups", "server_groups",
                                             version, {"all_projects": "True"}) for g in page]
        ctx.replace(models.ServerGroup, (_group_row(g) for g in groups), ("uuid",))
        migrations = [m for page in pages(compute, "/os-migrations", "migrations", version)
                      for m in page if m.get("status") not in FINISHED_MIGRATION_STATUSES]
        ctx.replace(models.ServerMigration, (_migration_row(m) for m in migrations), ("uuid",))
        _sync_aggregates(ctx, get_json(compute, "/os-aggregates", version)["aggregates"])
        changes.record(ctx, window, began)


def is_deleted(server: dict[str, Any]) -> bool:
    """True for a server Nova lists as deleted (only ``changes-since`` lists them)."""
    return server.get("status") == "DELETED" or server.get("OS-EXT-STS:vm_state") == "deleted"


def _sync_changed_servers(ctx: SyncContext, compute, version: str, since: str) -> None:
    """Upsert the servers Nova changed since ``since``, delete those it deleted; keep the rest."""
    changed: list[dict[str, Any]] = []
    gone: set[str] = set()
    for page in pages(compute, "/servers/detail", "servers", version,
                      {"all_tenants": 1, "changes-since": since}):
        for server in page:
            if is_deleted(server):
                gone.add(server["id"])
            else:
                changed.append(_server_row(server))
    servers = ctx.snapshot(models.Server, ("uuid",))
    servers.add(row for row in changed if row["uuid"] not in gone)
    servers.keep(lambda key: key[0] not in gone)
    servers.finish()
    ctx.detail["servers_changed"] = len(changed)
    ctx.detail["servers_deleted"] = len(gone)


def _sync_hypervisors(ctx: SyncContext, compute, version: str) -> datetime:
    """Hypervisors joined with their nova-compute services (zone, forced_down).

    Returns the time of Nova's first answer by Nova's clock (where this run began).
    """
    body, began = get_json_dated(compute, "/os-services", version, {"binary": "nova-compute"})
    services = {s["id"]: s for s in body["services"]}
    rows = []
    for page in pages(compute, "/os-hypervisors/detail", "hypervisors", version):
        for hypervisor in page:
            service = hypervisor.get("service") or {}
            row = _hypervisor_row(hypervisor, services.get(service.get("id"), {}))
            if row["host"]:
                rows.append(row)
            else:
                ctx.warn(f"hypervisor {hypervisor.get('id')} has no compute service: left out")
    ctx.replace(models.Hypervisor, rows, ("uuid",))
    return began


def _hypervisor_row(hypervisor: dict[str, Any], service: dict[str, Any]) -> dict[str, Any]:
    """A hypervisors row; the service's own fields win where both report them."""
    cpu_info = hypervisor.get("cpu_info")
    details = hypervisor.get("service") or {}
    return {
        "uuid": hypervisor["id"], "node": hypervisor["hypervisor_hostname"],
        "host": details.get("host") or service.get("host"), "service_id": details.get("id"),
        "state": service.get("state", hypervisor.get("state")),
        "status": service.get("status", hypervisor.get("status")),
        "disabled_reason": service.get("disabled_reason", details.get("disabled_reason")),
        "forced_down": bool(service.get("forced_down", False)), "zone": service.get("zone"),
        "hypervisor_type": hypervisor.get("hypervisor_type"),
        "hypervisor_version": hypervisor.get("hypervisor_version"),
        "host_ip": hypervisor.get("host_ip"),
        "cpu_arch": cpu_info.get("arch") if isinstance(cpu_info, dict) else None,
        "cpu_features": sorted(cpu_info.get("features") or ()) if isinstance(
            cpu_info, dict) else [],
        "cpu_info": cpu_info if isinstance(cpu_info, dict) else {},
    }


def _server_row(server: dict[str, Any]) -> dict[str, Any]:
    """A servers row from one entry of ``GET /servers/detail``."""
    flavor = dict(server.get("flavor") or {})
    flavor.pop("links", None)
    return {
        "uuid": server["id"], "name": server.get("name"),
        "host": server.get("OS-EXT-SRV-ATTR:host"),
        "node": server.get("OS-EXT-SRV-ATTR:hypervisor_hostname"),
        "status": server.get("status"), "vm_state": server.get("OS-EXT-STS:vm_state"),
        "task_state": server.get("OS-EXT-STS:task_state"),
        "project_id": server.get("tenant_id"), "user_id": server.get("user_id"),
        "availability_zone": server.get("OS-EXT-AZ:availability_zone"),
        "flavor_name": flavor.get("original_name"), "flavor": flavor,
        "created_at": parse_time(server.get("created")),
    }


def _flavor_row(compute, version: str, flavor: dict[str, Any]) -> dict[str, Any]:
    """A flavors row; extra specs are read per flavor only where not inline."""
    extra_specs = flavor.get("extra_specs")
    if extra_specs is None:
        extra_specs = get_json(compute, f"/flavors/{flavor['id']}/os-extra_specs",
                               version)["extra_specs"]
    return {
        "id": str(flavor["id"]), "name": flavor["name"], "vcpus": flavor["vcpus"],
        "ram": flavor["ram"], "disk": flavor["disk"],
        "ephemeral": flavor.get("OS-FLV-EXT-DATA:ephemeral") or 0,
        "swap": flavor.get("swap") or 0,
        "is_public": bool(flavor.get("os-flavor-access:is_public", True)),
        "is_disabled": bool(flavor.get("OS-FLV-DISABLED:disabled", False)),
        "description": flavor.get("description"), "extra_specs": extra_specs,
    }


def _group_row(group: dict[str, Any]) -> dict[str, Any]:
    """A server_groups row (``policies`` before 2.64 becomes its first policy)."""
    policy = group.get("policy") or next(iter(group.get("policies") or ()), None)
    return {"uuid": group["id"], "name": group.get("name"), "policy": policy,
            "rules": group.get("rules") or {}, "members": list(group.get("members") or ()),
            "project_id": group.get("project_id"), "user_id": group.get("user_id")}


def _migration_row(migration: dict[str, Any]) -> dict[str, Any]:
    """A server_migrations row.

    ``old_flavor_id``/``new_flavor_id`` hold Nova's ``old_instance_type_id`` and
    ``new_instance_type_id``: the flavors' row ids in Nova's database (an integer; a
    cold migration shows the same one twice), not the ids ``GET /flavors`` lists,
    which no Nova API maps them to (seen with Nova 34, ``tests/nova_loop``).
    """
    def flavor_id(key: str) -> str | None:
        value = migration.get(key)
        return None if value is None else str(value)

    return {
        "uuid": migration.get("uuid") or str(migration["id"]),
        "server_uuid": migration.get("instance_uuid"),
        "migration_type": migration.get("migration_type"), "status": migration.get("status"),
        "source_compute": migration.get("source_compute"),
        "source_node": migration.get("source_node"),
        "dest_compute": migration.get("dest_compute"), "dest_node": migration.get("dest_node"),
        "old_flavor_id": flavor_id("old_instance_type_id"),
        "new_flavor_id": flavor_id("new_instance_type_id"),
        "project_id": migration.get("project_id"),
        "created_at": parse_time(migration.get("created_at")),
        "updated_at": parse_time(migration.get("updated_at")),
    }


def _sync_aggregates(ctx: SyncContext, aggregates: list[dict[str, Any]]) -> None:
    """The knowledge tables ``aggregates`` and ``aggregate_hosts``, keyed by aggregate uuid."""
    ctx.replace(models.Aggregate, ({
        "uuid": a["uuid"], "name": a["name"], "availability_zone": a.get("availability_zone"),
        "metadata": dict(a.get("metadata") or {})} for a in aggregates), ("uuid",))
    table = models.Aggregate.__table__
    ids = dict(ctx.connection.execute(select(table.c.uuid, table.c.id)).all())
    ctx.replace(models.AggregateHost, ({"aggregate_id": ids[a["uuid"]], "host": host}
                                       for a in aggregates for host in a.get("hosts") or ()),
                ("aggregate_id", "host"))
