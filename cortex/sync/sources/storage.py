"""Cinder and Manila back-end pools into the knowledge table ``storage_pools``.

Cinder: ``GET /scheduler-stats/get_pools?detail=True``; Manila: ``GET
/scheduler-stats/pools/detail``. A pool's name is ``host@backend#pool``, the
caller's host identity. Its availability zone is the ``zone`` of the volume or
share service ``host@backend`` (``GET /os-services`` / ``GET /services``), unless
the capabilities state one. Manila names zones by id too (``availability_zones.id``,
a UUID, what its requests carry as ``availability_zone_id``): ``GET
/availability-zones`` maps each zone name to its id, stored with the pool as
``availability_zone_id`` (None for Cinder, whose zones have only names, and for a
zone Manila does not list). Manila's ``services`` and ``availability-zones`` URLs
exist from microversion 2.7 (``os-services``, ``os-availability-zone`` before), so
they are asked at 2.7. Capacities the drivers report as ``infinite`` or
``unknown`` are stored as infinity, which the schedulers' capacity filters
let pass too (cinder/scheduler/filters/capacity_filter.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from cortex.db import models
from cortex.sync.openstack import get_json
from cortex.sync.source import Source, SyncContext

EMPTY: Mapping[str, str] = MappingProxyType({})
CAPACITY_FIELDS = ("total_capacity_gb", "free_capacity_gb", "allocated_capacity_gb",
                   "provisioned_capacity_gb")


def gigabytes(value: Any) -> float:
    """A capacity in GiB; ``infinite``/``unknown`` (Cinder's words) are infinity, None is 0."""
    if value is None:
        return 0.0
    if isinstance(value, str) and value.strip().lower() in ("infinite", "unknown"):
        return float("inf")
    return float(value)


def pool_row(service: str, name: str, capabilities: dict[str, Any],
             zones: Mapping[str, str | None],
             zone_ids: Mapping[str, str] = EMPTY) -> dict[str, Any]:
    """A storage_pools row of one pool (defaults: Cinder's for missing capabilities).

    ``zones`` maps a service ``host@backend`` to its zone name, ``zone_ids`` a zone
    name to its id (Manila's; empty for Cinder).
    """
    ratio = capabilities.get("max_over_subscription_ratio", 1.0)
    zone = capabilities.get("availability_zone") or zones.get(name.split("#", 1)[0])
    return {
        "service": service, "name": name,
        "availability_zone": zone,
        "availability_zone_id": zone_ids.get(zone) if zone else None,
        **{field: gigabytes(capabilities.get(field)) for field in CAPACITY_FIELDS},
        "reserved_percentage": float(capabilities.get("reserved_percentage") or 0),
        "max_over_subscription_ratio": float(ratio) if ratio not in (None, "auto") else 1.0,
        "thin_provisioning_support": bool(capabilities.get("thin_provisioning_support", False)),
        "thick_provisioning_support": bool(capabilities.get("thick_provisioning_support", True)),
        "capabilities": capabilities,
    }


class _PoolSource(Source):
    """Shared shape of the two storage sources."""

    pools_path: str
    services_path: str
    service_binary: str
    proxy_name: str
    #: The microversion the services (and zones) are asked at; None: the service's default.
    microversion: str | None = None

    def __init__(self, cloud: Callable[[], Any]) -> None:
        self._cloud = cloud

    def sync(self, ctx: SyncContext) -> None:
        """Write this service's rows of ``storage_pools``."""
        proxy = getattr(self._cloud(), self.proxy_name)
        zones = {s["host"]: s.get("zone") for s in get_json(
            proxy, self.services_path, self.microversion,
            params={"binary": self.service_binary})["services"]}
        zone_ids = self.zone_ids(proxy)
        pools = get_json(proxy, self.pools_path)["pools"]
        table = models.StoragePool.__table__
        ctx.replace(table, (pool_row(self.name, p["name"], dict(p.get("capabilities") or {}),
                                     zones, zone_ids) for p in pools),
                    ("service", "name"), scope=table.c.service == self.name)

    def zone_ids(self, proxy: Any) -> Mapping[str, str]:
        """``{zone name: zone id}``; empty where the service names zones only."""
        return EMPTY


class CinderSource(_PoolSource):
    """Cinder volume back-end pools (``cloud().block_storage``)."""

    name = "cinder"
    pools_path = "/scheduler-stats/get_pools?detail=True"
    services_path = "/os-services"
    service_binary = "cinder-volume"
    proxy_name = "block_storage"


class ManilaSource(_PoolSource):
    """Manila share back-end pools (``cloud().shared_file_system``)."""

    name = "manila"
    pools_path = "/scheduler-stats/pools/detail"
    services_path = "/services"
    service_binary = "manila-share"
    proxy_name = "shared_file_system"
    microversion = "2.7"

    def zone_ids(self, proxy: Any) -> Mapping[str, str]:
        """``{zone name: zone id}`` from Manila's ``GET /availability-zones``.

        The answer is ``{"availability_zones": [{"id", "name", "created_at",
        "updated_at"}]}`` (Manila's api-ref, "List availability zones").
        """
        listed = get_json(proxy, "/availability-zones", self.microversion)
        return {z["name"]: str(z["id"]) for z in listed.get("availability_zones") or ()
                if z.get("name") and z.get("id")}
