"""Cinder and Manila back-end pools into the knowledge table ``storage_pools``.

Cinder: ``GET /scheduler-stats/get_pools?detail=True``; Manila: ``GET
/scheduler-stats/pools/detail``. A pool's name is ``host@backend#pool``, the
caller's host identity. Its availability zone is the ``zone`` of the volume or
share service ``host@backend`` (``GET /os-services`` / ``GET /services``), unless
the capabilities state one. Capacities the drivers report as ``infinite`` or
``unknown`` are stored as infinity, which the schedulers' capacity filters
let pass too (cinder/scheduler/filters/capacity_filter.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cortex.db import models
from cortex.sync.openstack import get_json
from cortex.sync.source import Source, SyncContext

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
             zones: dict[str, str]) -> dict[str, Any]:
    """A storage_pools row of one pool (defaults: Cinder's for missing capabilities)."""
    ratio = capabilities.get("max_over_subscription_ratio", 1.0)
    return {
        "service": service, "name": name,
        "availability_zone": capabilities.get("availability_zone") or zones.get(
            name.split("#", 1)[0]),
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

    def __init__(self, cloud: Callable[[], Any]) -> None:
        self._cloud = cloud

    def sync(self, ctx: SyncContext) -> None:
        """Write this service's rows of ``storage_pools``."""
        proxy = getattr(self._cloud(), self.proxy_name)
        zones = {s["host"]: s.get("zone") for s in get_json(
            proxy, self.services_path, params={"binary": self.service_binary})["services"]}
        pools = get_json(proxy, self.pools_path)["pools"]
        table = models.StoragePool.__table__
        ctx.replace(table, (pool_row(self.name, p["name"], dict(p.get("capabilities") or {}),
                                     zones) for p in pools),
                    ("service", "name"), scope=table.c.service == self.name)


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
