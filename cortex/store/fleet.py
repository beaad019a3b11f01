"""Import a fleet description (YAML or JSON) into the knowledge tables.

The format (``etc/cortex/demo-fleet.yaml`` is the worked example)::

    aggregates:   [{name, uuid, availability_zone?, metadata?, hosts: [host]}]
    hosts:        [{host, node?, uuid, availability_zone?, hypervisor_type?,
                    hypervisor_version?, cpu_arch?, enabled?, up?, disabled_reason?,
                    traits?: [str], inventories?: {RC: {total, reserved?, min_unit?,
                    max_unit?, step_size?, allocation_ratio?, used?}},
                    features?: {name: float}, cpu_features?: [str],
                    instances?: [{uuid, project_id?, vm_state?, task_state?, cpu_busy?,
                                  flavor?: {original_name, vcpus, ram, disk, ephemeral?,
                                            swap?, extra_specs?}}],
                    migrations?: [{uuid, instance_uuid?, source_host?, dest_host?, status,
                                  resources?: {RC: int}}],
                    failed_builds?: int, allowed_projects?: [str],
                    cpu_info?: {arch?, vendor?, model?, topology?, features?, ...},
                    host_ip?: str, supported_instances?: [[arch, hv_type, vm_mode]],
                    topology?: {report: NAME | {...},
                                gpus_in_use?: [pci address] | {pci address: instance uuid},
                                mig_in_use?: {pci address: [instance id]},
                                cells?: {cell id: {pinned_cpus?, cpu_usage?, memory_usage_mb?,
                                                   hugepages?: {size_kb: {total?, used?}}}}}}]
    storage_pools: [{service: cinder|manila, name: host@backend#pool,
                    availability_zone?, availability_zone_id?, total_capacity_gb, free_capacity_gb,
                    allocated_capacity_gb?, provisioned_capacity_gb?, reserved_percentage?,
                    max_over_subscription_ratio?, thin_provisioning_support?,
                    thick_provisioning_support?, capabilities?: {},
                    features?: {name: float}, resource_count?: int}]

The optional host and pool facts (features, cpu_features, instances, migrations,
failed_builds, allowed_projects, resource_count, a pool's availability_zone_id: the
UUID of its zone, what Manila's requests name) are what the syncers fill in
production; see :class:`cortex.knowledge.view.HostState`. Each instance is also a row
of the ``servers`` table, as Nova's servers list would give it, with its ``flavor`` in
Nova's embedded form (API >= 2.47) when given: the descheduler asks the pipelines where
such an instance could move.

An import replaces the whole knowledge snapshot in one transaction and bumps the
knowledge version, so a bad file (rejected by the schema below) changes nothing.

A host's ``topology`` stands in for what its cortex-agent would report: ``report`` is a
``TopologyReport`` document, or the name of one in the ``topology/`` folder next to the
fleet file (``etc/cortex/topology/hgx-h100-8gpu.json``), then the host's own usage on top:
GPUs taken by guests (``in_use_source: fleet``; a mapping names each GPU's instance),
MIG instances taken, and per NUMA cell
the pinned CPUs, shared vCPUs, memory used (MiB) and huge pages configured/used (a huge
page total moves the 4 KiB page count with it).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, insert

from cortex.cpuset import format_cpuset, parse_cpuset
from cortex.db import models
from cortex.documents import load_document
from cortex.store.reports import TopologyError, store_report
from cortex.store.version import bump_version

_INVENTORY = {
    "type": "object",
    "required": ["total"],
    "additionalProperties": False,
    "properties": {k: {"type": "integer", "minimum": 0} for k in (
        "total", "reserved", "min_unit", "max_unit", "step_size", "used")}
    | {"allocation_ratio": {"type": "number", "exclusiveMinimum": 0}},
}
_STR_OR_NULL = {"type": ["string", "null"]}
#: A zone's id: ``storage_pools.availability_zone_id`` holds 36 characters (a UUID).
_ZONE_ID = {"type": ["string", "null"], "maxLength": 36}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_FEATURES = {"type": "object", "additionalProperties": {"type": "number"}}
_COUNT = {"type": "integer", "minimum": 0}
_INSTANCE = {
    "type": "object", "required": ["uuid"], "additionalProperties": False,
    "properties": {"uuid": {"type": "string"}, "project_id": _STR_OR_NULL,
                   "vm_state": _STR_OR_NULL, "task_state": _STR_OR_NULL,
                   "cpu_busy": {"type": "number", "minimum": 0},
                   "flavor": {
                       "type": "object", "required": ["vcpus", "ram"],
                       "additionalProperties": False,
                       "properties": {"original_name": {"type": "string"},
                                      "vcpus": {"type": "integer", "minimum": 1},
                                      "ram": {"type": "integer", "minimum": 1},
                                      "disk": _COUNT, "ephemeral": _COUNT, "swap": _COUNT,
                                      "extra_specs": {"type": "object",
                                                      "additionalProperties": {
                                                          "type": "string"}}}}},
}
_MIGRATION = {
    "type": "object", "required": ["uuid", "status"], "additionalProperties": False,
    "properties": {"uuid": {"type": "string"}, "instance_uuid": _STR_OR_NULL,
                   "source_host": _STR_OR_NULL, "dest_host": _STR_OR_NULL,
                   "status": {"type": "string"},
                   "resources": {"type": "object", "additionalProperties": _COUNT}},
}
_TOPOLOGY = {
    "type": "object", "required": ["report"], "additionalProperties": False,
    "properties": {
        "report": {"type": ["string", "object"]},
        "gpus_in_use": {"oneOf": [
            {"type": "array", "items": {"type": "string"}},
            {"type": "object", "additionalProperties": {"type": "string", "minLength": 1,
                                                        "maxLength": 36}}]},
        "mig_in_use": {"type": "object", "additionalProperties": {
            "type": "array", "items": _COUNT}},
        "cells": {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"},
                  "additionalProperties": {
                      "type": "object", "additionalProperties": False, "properties": {
                          "pinned_cpus": {"type": "string"}, "cpu_usage": _COUNT,
                          "memory_usage_mb": _COUNT,
                          "hugepages": {"type": "object",
                                        "propertyNames": {"pattern": "^[0-9]+$"},
                                        "additionalProperties": {
                                            "type": "object", "additionalProperties": False,
                                            "properties": {"total": _COUNT, "used": _COUNT}}}}}},
    },
}
FLEET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "aggregates": {"type": "array", "items": {
            "type": "object", "required": ["name", "uuid"], "additionalProperties": False,
            "properties": {
                "name": {"type": "string"}, "uuid": {"type": "string"},
                "availability_zone": _STR_OR_NULL,
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                "hosts": {"type": "array", "items": {"type": "string"}},
            }}},
        "hosts": {"type": "array", "items": {
            "type": "object", "required": ["host", "uuid"], "additionalProperties": False,
            "properties": {
                "host": {"type": "string", "minLength": 1}, "node": {"type": "string"},
                "uuid": {"type": "string"}, "availability_zone": _STR_OR_NULL,
                "hypervisor_type": _STR_OR_NULL, "hypervisor_version": {"type": "integer"},
                "cpu_arch": _STR_OR_NULL, "enabled": {"type": "boolean"},
                "up": {"type": "boolean"}, "disabled_reason": _STR_OR_NULL,
                "traits": _STRINGS,
                "inventories": {"type": "object", "additionalProperties": _INVENTORY},
                "features": _FEATURES, "cpu_features": _STRINGS,
                "instances": {"type": "array", "items": _INSTANCE},
                "migrations": {"type": "array", "items": _MIGRATION},
                "failed_builds": _COUNT, "allowed_projects": _STRINGS,
                "cpu_info": {"type": "object"}, "host_ip": _STR_OR_NULL,
                "supported_instances": {"type": "array", "items": {
                    "type": "array", "items": {"type": "string"},
                    "minItems": 3, "maxItems": 3}},
                "topology": _TOPOLOGY,
            }}},
        "storage_pools": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["service", "name", "total_capacity_gb", "free_capacity_gb"],
            "properties": {
                "service": {"enum": ["cinder", "manila"]}, "name": {"type": "string"},
                "availability_zone": _STR_OR_NULL, "availability_zone_id": _ZONE_ID,
                "capabilities": {"type": "object"},
                "thin_provisioning_support": {"type": "boolean"},
                "thick_provisioning_support": {"type": "boolean"},
                "features": _FEATURES, "resource_count": _COUNT,
            } | {k: {"type": "number", "minimum": 0} for k in (
                "total_capacity_gb", "free_capacity_gb", "allocated_capacity_gb",
                "provisioned_capacity_gb", "reserved_percentage",
                "max_over_subscription_ratio")}}},
    },
}


class FleetError(ValueError):
    """The fleet file is unreadable or does not match FLEET_SCHEMA; nothing was written."""


def read_fleet(path: str | Path) -> dict[str, Any]:
    """Parse and validate a fleet file (YAML is a superset of JSON); raise FleetError."""
    data = load_document(path, FLEET_SCHEMA, FleetError, empty={})
    for host in data.get("hosts", ()):
        topology = host.get("topology")
        if topology and isinstance(topology["report"], str):
            topology["report"] = _read_report(Path(path).parent / "topology",
                                              topology["report"])
    return data


def _read_report(folder: Path, name: str) -> dict[str, Any]:
    """A topology report document shipped next to the fleet file; FleetError if unreadable."""
    try:
        return json.loads((folder / f"{name}.json").read_text())
    except (OSError, ValueError) as exc:
        raise FleetError(f"topology report {name!r}: {exc}") from None


def import_fleet(connection: Connection, fleet: Mapping[str, Any]) -> dict[str, int]:
    """Replace the knowledge tables with ``fleet`` and bump the version.

    Runs on the caller's ``connection`` inside its transaction (commit or roll back
    is the caller's). Returns row counts ``{"hosts", "aggregates", "storage_pools"}``.
    """
    for table in (models.ResourceInventory, models.ComputeNode, models.AggregateHost,
                  models.Aggregate, models.StoragePool, models.HostTopology, models.Server):
        connection.execute(delete(table))
    for aggregate in fleet.get("aggregates", ()):
        _insert_aggregate(connection, aggregate)
    now = datetime.now(UTC)
    for host in fleet.get("hosts", ()):
        _insert_node(connection, host)
        if host.get("topology"):
            try:
                store_report(connection, host["host"], topology_report(host["topology"]), now,
                             bump=False)
            except (TopologyError, KeyError, ValueError) as exc:
                raise FleetError(f"host {host['host']}: topology: {exc}") from None
    servers = _server_rows(fleet.get("hosts", ()))
    if servers:
        connection.execute(insert(models.Server), servers)
    pools = [_pool_row(p) for p in fleet.get("storage_pools", ())]
    if pools:
        connection.execute(insert(models.StoragePool), pools)
    bump_version(connection)
    return {"hosts": len(fleet.get("hosts", ())), "aggregates": len(fleet.get("aggregates", ())),
            "storage_pools": len(pools)}


def _server_rows(hosts) -> list[dict[str, Any]]:
    """A ``servers`` row per instance (listed on several nodes of a host: its first node)."""
    rows: dict[str, dict[str, Any]] = {}
    for host in hosts:
        for item in host.get("instances", ()):
            flavor = dict(item.get("flavor") or {})
            rows.setdefault(item["uuid"], {
                "uuid": item["uuid"], "host": host["host"],
                "node": host.get("node") or host["host"], "status": "ACTIVE",
                "vm_state": item.get("vm_state"), "task_state": item.get("task_state"),
                "project_id": item.get("project_id"),
                "availability_zone": host.get("availability_zone"),
                "flavor_name": flavor.get("original_name"), "flavor": flavor})
    return list(rows.values())


def _insert_aggregate(connection: Connection, aggregate: Mapping[str, Any]) -> None:
    """One aggregate and its members; the AZ is also kept in the metadata, as Nova does."""
    metadata = dict(aggregate.get("metadata") or {})
    if aggregate.get("availability_zone"):
        metadata["availability_zone"] = aggregate["availability_zone"]
    aggregate_id = connection.execute(insert(models.Aggregate).values(
        uuid=aggregate["uuid"], name=aggregate["name"],
        availability_zone=aggregate.get("availability_zone"), metadata_=metadata,
    ).returning(models.Aggregate.id)).scalar_one()
    members = [{"aggregate_id": aggregate_id, "host": h} for h in aggregate.get("hosts", ())]
    if members:
        connection.execute(insert(models.AggregateHost), members)


def _insert_node(connection: Connection, host: Mapping[str, Any]) -> None:
    """One compute node and its inventories (``max_unit`` defaults to ``total``)."""
    node_id = connection.execute(insert(models.ComputeNode).values(
        host=host["host"], node=host.get("node") or host["host"], uuid=host["uuid"],
        availability_zone=host.get("availability_zone"),
        hypervisor_type=host.get("hypervisor_type"),
        hypervisor_version=host.get("hypervisor_version"), cpu_arch=host.get("cpu_arch"),
        enabled=host.get("enabled", True), up=host.get("up", True),
        disabled_reason=host.get("disabled_reason"), traits=list(host.get("traits", ())),
        features=dict(host.get("features") or {}),
        cpu_features=list(host.get("cpu_features", ())),
        instances=[{k: v for k, v in i.items() if k != "flavor"}
                   for i in host.get("instances", ())],
        migrations=[dict(m) for m in host.get("migrations", ())],
        failed_builds=host.get("failed_builds", 0),
        allowed_projects=list(host.get("allowed_projects", ())),
        cpu_info=dict(host.get("cpu_info") or {}), host_ip=host.get("host_ip"),
        supported_instances=host.get("supported_instances"),
    ).returning(models.ComputeNode.id)).scalar_one()
    rows = [{"compute_node_id": node_id, "resource_class": rc, "total": inv["total"],
             "reserved": inv.get("reserved", 0), "min_unit": inv.get("min_unit", 1),
             "max_unit": inv.get("max_unit", inv["total"]), "step_size": inv.get("step_size", 1),
             "allocation_ratio": inv.get("allocation_ratio", 1.0), "used": inv.get("used", 0)}
            for rc, inv in (host.get("inventories") or {}).items()]
    if rows:
        connection.execute(insert(models.ResourceInventory), rows)


def _pool_row(pool: Mapping[str, Any]) -> dict[str, Any]:
    """A storage_pools row with Cinder's defaults for what the file leaves out."""
    return {
        "service": pool["service"], "name": pool["name"],
        "availability_zone": pool.get("availability_zone"),
        "availability_zone_id": pool.get("availability_zone_id"),
        "total_capacity_gb": pool["total_capacity_gb"],
        "free_capacity_gb": pool["free_capacity_gb"],
        "allocated_capacity_gb": pool.get("allocated_capacity_gb", 0.0),
        "provisioned_capacity_gb": pool.get("provisioned_capacity_gb", 0.0),
        "reserved_percentage": pool.get("reserved_percentage", 0),
        "max_over_subscription_ratio": pool.get("max_over_subscription_ratio", 1.0),
        "thin_provisioning_support": pool.get("thin_provisioning_support", False),
        "thick_provisioning_support": pool.get("thick_provisioning_support", True),
        "capabilities": dict(pool.get("capabilities") or {}),
        "features": dict(pool.get("features") or {}),
        "resource_count": pool.get("resource_count", 0),
    }


def topology_report(topology: Mapping[str, Any]) -> dict[str, Any]:
    """The report of a fleet host's ``topology``: the base report with the host's usage.

    Raises FleetError for a report given by name only (resolved by :func:`read_fleet`),
    a GPU or cell the report does not have, or a CPU list that does not parse.
    """
    if not isinstance(topology["report"], Mapping):
        raise FleetError(f"topology report {topology['report']!r} was not resolved")
    report = copy.deepcopy(dict(topology["report"]))
    gpus = {g["pci_address"]: g for g in report.get("gpus", ())}
    in_use = topology.get("gpus_in_use") or ()
    holders = in_use if isinstance(in_use, Mapping) else dict.fromkeys(in_use)
    for address, holder in holders.items():
        if address not in gpus:
            raise FleetError(f"gpus_in_use: no GPU {address}")
        gpus[address].update(in_use=True, in_use_source="fleet", instance_uuid=holder)
    for address, ids in (topology.get("mig_in_use") or {}).items():
        instances = {i["id"]: i for i in ((gpus.get(address) or {}).get("mig") or {}).get(
            "instances", ())}
        for instance_id in ids:
            if instance_id not in instances:
                raise FleetError(f"mig_in_use: no MIG instance {instance_id} on {address}")
            instances[instance_id]["in_use"] = True
    cells = {str(c["id"]): c for c in report.get("numa_cells", ())}
    for cell_id, usage in (topology.get("cells") or {}).items():
        if cell_id not in cells:
            raise FleetError(f"cells: no NUMA cell {cell_id}")
        _cell_usage(cells[cell_id], usage)
    return report


def _cell_usage(cell: dict[str, Any], usage: Mapping[str, Any]) -> None:
    """Apply one cell's usage from the fleet file to a report cell."""
    if "pinned_cpus" in usage:
        cell["pinned_cpus"] = format_cpuset(parse_cpuset(usage["pinned_cpus"]))
    for key in ("cpu_usage", "memory_usage_mb"):
        if key in usage:
            cell[key] = usage[key]
    pages = {p["size_kb"]: p for p in cell.get("mempages", ())}
    for size, counts in (usage.get("hugepages") or {}).items():
        page = pages.setdefault(int(size), {"size_kb": int(size), "total": 0, "used": 0,
                                            "reserved": 0})
        page.update(counts)
    small = pages.get(4)
    if small is not None:
        huge_kb = sum(size * p["total"] for size, p in pages.items() if size != 4)
        small["total"] = max(cell["memory_mb"] * 1024 - huge_kb, 0) // 4
    cell["mempages"] = [pages[size] for size in sorted(pages)]
