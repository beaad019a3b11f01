"""Placement: resource provider trees with inventories, usages, traits and aggregates.

``GET /resource_providers`` lists every provider with its generation, root and
parent (microversion >= 1.14). Every provider's usages are read on every run;
its inventories, traits and aggregates only when its generation moved since the
stored snapshot (all of them the first time): Placement bumps the generation on
every change of those three, but not when allocations are deleted with ``DELETE
/allocations/{consumer}`` (checked against Placement 16.0.0), so usages cannot
rely on it. The per-provider calls run ``[sync] concurrency`` at a time. A
provider deleted between the list and its detail calls (404) is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from cortex.db import models
from cortex.sync.openstack import SourceError, get_json, negotiate
from cortex.sync.source import Source, SyncContext

WANTED_MICROVERSION = "1.39"
MINIMUM_MICROVERSION = "1.14"  # root_provider_uuid and parent_provider_uuid


@dataclass
class ProviderDetail:
    """What the four per-provider calls returned (``missing``: the provider is gone)."""

    uuid: str
    inventories: dict[str, dict[str, Any]] = field(default_factory=dict)
    usages: dict[str, int] = field(default_factory=dict)
    traits: list[str] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)
    missing: bool = False


class PlacementSource(Source):
    """Sync Placement through ``cloud().placement`` (an openstacksdk proxy)."""

    name = "placement"

    def __init__(self, cloud: Callable[[], Any], concurrency: int = 8) -> None:
        self._cloud = cloud
        self._concurrency = max(1, concurrency)

    def sync(self, ctx: SyncContext) -> None:
        """Write resource_providers and the provider inventories, traits and aggregates."""
        placement = self._cloud().placement
        version = negotiate(placement, WANTED_MICROVERSION, MINIMUM_MICROVERSION)
        providers = get_json(placement, "/resource_providers", version)["resource_providers"]
        table = models.ResourceProvider.__table__
        stored = dict(ctx.connection.execute(select(table.c.uuid, table.c.generation)).all())
        stale = {p["uuid"] for p in providers if stored.get(p["uuid"]) != p["generation"]}
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="placement") as pool:
            details = {d.uuid: d for d in pool.map(
                lambda p: _detail(placement, version, p["uuid"], p["uuid"] in stale), providers)}
        providers = [p for p in providers if not details[p["uuid"]].missing]
        ctx.replace(table, (_provider_row(p) for p in providers), ("uuid",))
        unchanged = {p["uuid"] for p in providers} - stale
        _fill_unchanged_inventories(ctx, details, unchanged)
        _write_details(ctx, [details[p["uuid"]] for p in providers], unchanged)
        ctx.detail["providers_refreshed"] = len(stale & set(details))


def _detail(placement, version: str, uuid: str, full: bool) -> ProviderDetail:
    """Usages of one provider, and its inventories, traits and aggregates when ``full``."""
    base = f"/resource_providers/{uuid}"
    try:
        detail = ProviderDetail(uuid, usages=get_json(placement, f"{base}/usages",
                                                      version)["usages"])
        if full:
            detail.inventories = get_json(placement, f"{base}/inventories",
                                          version)["inventories"]
            detail.traits = get_json(placement, f"{base}/traits", version)["traits"]
            detail.aggregates = get_json(placement, f"{base}/aggregates", version)["aggregates"]
    except SourceError as exc:
        if exc.status == 404:
            return ProviderDetail(uuid, missing=True)
        raise
    return detail


def _fill_unchanged_inventories(ctx: SyncContext, details: dict[str, ProviderDetail],
                                unchanged: set[str]) -> None:
    """Inventories of providers whose generation stood: the stored rows, usages fresh."""
    table = models.ProviderInventory.__table__
    for row in ctx.connection.execute(select(table)).mappings():
        if row["provider_uuid"] in unchanged:
            details[row["provider_uuid"]].inventories[row["resource_class"]] = dict(row)


def _provider_row(provider: dict[str, Any]) -> dict[str, Any]:
    """A resource_providers row."""
    return {"uuid": provider["uuid"], "name": provider["name"],
            "generation": provider["generation"],
            "root_provider_uuid": provider.get("root_provider_uuid") or provider["uuid"],
            "parent_provider_uuid": provider.get("parent_provider_uuid")}


def _write_details(ctx: SyncContext, details: list[ProviderDetail],
                   unchanged: set[str]) -> None:
    """Snapshot the three per-provider tables; traits and aggregates of ``unchanged`` stand."""
    tables = (
        (models.ProviderInventory, ("provider_uuid", "resource_class"), _inventory_rows),
        (models.ProviderTrait, ("provider_uuid", "trait"),
         lambda d: ({"provider_uuid": d.uuid, "trait": t} for t in d.traits)),
        (models.ProviderAggregate, ("provider_uuid", "aggregate_uuid"),
         lambda d: ({"provider_uuid": d.uuid, "aggregate_uuid": a} for a in d.aggregates)),
    )
    for model, key, rows_of in tables:
        snapshot = ctx.snapshot(model, key)
        if model is not models.ProviderInventory:
            snapshot.keep(lambda k: k[0] in unchanged)
        for detail in details:
            snapshot.add(rows_of(detail))
        snapshot.finish()


def _inventory_rows(detail: ProviderDetail):
    """provider_inventories rows: Placement's inventory fields and the usage of the class."""
    for resource_class, inventory in detail.inventories.items():
        yield {"provider_uuid": detail.uuid, "resource_class": resource_class,
               "total": inventory["total"], "reserved": inventory.get("reserved", 0),
               "min_unit": inventory.get("min_unit", 1),
               "max_unit": inventory.get("max_unit", inventory["total"]),
               "step_size": inventory.get("step_size", 1),
               "allocation_ratio": float(inventory.get("allocation_ratio", 1.0)),
               "used": int(detail.usages.get(resource_class, 0))}
