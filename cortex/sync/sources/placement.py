"""Placement: resource provider trees with inventories, usages, traits and aggregates.

``GET /resource_providers`` lists every provider with its generation, root and
parent (microversion >= 1.14). Placement bumps a provider's generation on every
change of its inventories, traits and aggregates and when allocations against
it are written, but not when they are deleted (``DELETE /allocations/{consumer}``,
checked against Placement 16.0.0 and by ``tests/sync/test_placement.py``). So a
run reads:

- inventories, usages and aggregates of the providers whose generation moved
  (all of them the first time); their traits too, or, when at least half of the
  providers moved and Placement has microversion 1.18, every provider's traits
  as one ``GET /resource_providers?required=<trait>`` per trait in use (``GET
  /traits?associated=true``) instead of one call per provider;
- usages of every provider on a full run (:mod:`cortex.sync.changes`: the first,
  then every ``[sync] full_sync_interval``), and in between only of the trees
  whose compute node Nova names among the servers (``changes-since``) and
  migrations (source and destination node, microversion 2.59) changed since the
  previous run: deleted allocations belong to a deleted, moved or resized server;
- nothing else: the stored rows stand.

Where Nova cannot be asked, every run reads every provider's usages. The
per-provider calls run ``[sync] concurrency`` at a time. A provider deleted
between the list and its detail calls (404) is left out.

A Python client spends 1.2-1.8 ms of CPU on each call (requests, keystoneauth,
openstacksdk: measured by ``bench/sync_scale.py``), and one process makes its calls
under one interpreter lock, so a first read of 30,000 providers (90,000 calls) takes
minutes in one process however many calls are in flight. With ``[sync]
placement_processes`` above 1 a large read is divided between that many processes,
each with its own connection and ``concurrency`` calls in flight (at least
:data:`MIN_PER_PROCESS` providers each).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from keystoneauth1 import discover
from sqlalchemy import select

from cortex.db import models
from cortex.sync import changes
from cortex.sync.openstack import SourceError, get_json, get_json_dated, negotiate, pages
from cortex.sync.source import Source, SyncContext

WANTED_MICROVERSION = "1.39"
MINIMUM_MICROVERSION = "1.14"  # root_provider_uuid and parent_provider_uuid
REQUIRED_TRAITS_MICROVERSION = "1.18"  # GET /resource_providers?required=
NOVA_WANTED_MICROVERSION = "2.100"
NOVA_MINIMUM_MICROVERSION = "2.1"
NOVA_MIGRATION_CHANGES_MICROVERSION = "2.59"  # GET /os-migrations?changes-since=
#: Providers a reading process takes at least: starting one (a fresh interpreter that
#: imports openstacksdk and authenticates) costs about a second, the calls of 500
#: providers about two.
MIN_PER_PROCESS = 500
#: (provider uuid, read it all, read its usages): what a reader asks about a provider.
Job = tuple[str, bool, bool]


@dataclass
class ProviderDetail:
    """What the per-provider calls returned (``missing``: the provider is gone).

    ``usages`` is None when they were not read (the stored ``used`` stands);
    ``inventories`` is None when they were not read (the stored rows stand).
    """

    uuid: str
    inventories: dict[str, dict[str, Any]] | None = None
    usages: dict[str, int] | None = None
    traits: list[str] = field(default_factory=list)
    aggregates: list[str] = field(default_factory=list)
    missing: bool = False


class PlacementSource(Source):
    """Sync Placement through ``cloud().placement`` (an openstacksdk proxy).

    ``full_interval`` and ``overlap`` are ``[sync] full_sync_interval`` and
    ``changes_since_overlap``; a ``full_interval`` of 0 reads every usage on
    every run.
    """

    name = "placement"

    def __init__(self, cloud: Callable[[], Any], concurrency: int = 8,
                 full_interval: float = 0.0, overlap: float = 300.0, processes: int = 1,
                 connect: Callable[[], Any] | None = None) -> None:
        """Read through ``cloud()``'s placement proxy, ``concurrency`` calls at a time.

        ``processes`` > 1 divides large reads between processes, each making its own
        connection with ``connect`` (picklable; None: one process).
        """
        self._cloud = cloud
        self._concurrency = max(1, concurrency)
        self._full_interval = full_interval
        self._overlap = overlap
        self._processes = max(1, processes) if connect is not None else 1
        self._connect = connect

    def sync(self, ctx: SyncContext) -> None:
        """Write resource_providers and the provider inventories, traits and aggregates."""
        window = changes.plan(ctx, self._full_interval, self._overlap)
        changed_nodes, began, window = self._changed_nodes(ctx, window)
        placement = self._cloud().placement
        version = negotiate(placement, WANTED_MICROVERSION, MINIMUM_MICROVERSION)
        providers = get_json(placement, "/resource_providers", version)["resource_providers"]
        table = models.ResourceProvider.__table__
        stored = dict(ctx.connection.execute(select(table.c.uuid, table.c.generation)).all())
        stale = {p["uuid"] for p in providers if stored.get(p["uuid"]) != p["generation"]}
        if window.full:
            usages = {p["uuid"] for p in providers}
        else:
            usages = stale | _trees_of(providers, changed_nodes)
        bulk_traits = (len(stale) * 2 >= len(providers) and len(stale) > 1
                       and _at_least(version, REQUIRED_TRAITS_MICROVERSION))

        # The per-provider calls name the endpoint found once: keystoneauth looks an
        # absolute URL up in no catalog, a fifth of each call's time otherwise.
        endpoint = (placement.get_endpoint() or "").rstrip("/")

        jobs = [(p["uuid"], p["uuid"] in stale, p["uuid"] in usages) for p in providers
                if p["uuid"] in stale or p["uuid"] in usages]
        details = {p["uuid"]: ProviderDetail(p["uuid"]) for p in providers}
        processes = ctx.detail["reading_processes"] = self._processes_for(len(jobs))
        details.update((d.uuid, d) for d in self._read(
            placement, version, endpoint, jobs, not bulk_traits, processes))
        providers = [p for p in providers if not details[p["uuid"]].missing]
        if bulk_traits:
            _read_traits(placement, version, details)
        ctx.replace(table, (_provider_row(p) for p in providers), ("uuid",))
        _fill_stored_inventories(ctx, details, usages - stale)
        _write_details(ctx, [details[p["uuid"]] for p in providers], stale,
                       traits_read=bulk_traits)
        ctx.detail["providers_refreshed"] = len(stale & set(details))
        ctx.detail["usages_refreshed"] = len(usages & set(details))
        ctx.detail["traits"] = "per trait" if bulk_traits else "per provider"
        changes.record(ctx, window, began)

    def _processes_for(self, providers: int) -> int:
        """Processes that read ``providers`` providers' details (1: this one)."""
        return max(1, min(self._processes, providers // MIN_PER_PROCESS))

    def _read(self, placement: Any, version: str, endpoint: str, jobs: list[Job],
              traits: bool, processes: int) -> list[ProviderDetail]:
        """The details ``jobs`` ask for, read here (``processes`` 1) or divided between processes.

        Raises SourceError for a failed call, in whichever process it failed, and when
        a reading process died.
        """
        if processes == 1:
            return read_details(placement, version, endpoint, jobs, traits, self._concurrency)
        size = -(-len(jobs) // processes)
        pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = [pool.submit(_read_in_reader, self._connect, version, endpoint,
                                   jobs[i:i + size], traits, self._concurrency)
                       for i in range(0, len(jobs), size)]
            return [detail for future in futures for detail in future.result()]
        except BrokenProcessPool as exc:
            raise SourceError(f"placement: a reading process died: {exc}") from None
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _changed_nodes(self, ctx: SyncContext, window: changes.ChangeWindow
                       ) -> tuple[set[str], datetime, changes.ChangeWindow]:
        """Nodes of the servers and migrations Nova changed since ``window.since``.

        Also where this run began by Nova's clock. When Nova cannot be asked,
        the run becomes a full one (every usage read) and says why.
        """
        try:
            compute = self._cloud().compute
            nova = negotiate(compute, NOVA_WANTED_MICROVERSION, NOVA_MINIMUM_MICROVERSION)
            began = get_json_dated(compute, "/servers/detail", nova,
                                   {"all_tenants": 1, "limit": 1})[1]
            if window.full:
                return set(), began, window
            if not _at_least(nova, NOVA_MIGRATION_CHANGES_MICROVERSION):
                raise SourceError(f"compute microversion {nova} lists no migration changes")
            since = window.since_param()
            nodes: set[str | None] = set()
            for page in pages(compute, "/servers/detail", "servers", nova,
                              {"all_tenants": 1, "changes-since": since}):
                nodes.update(s.get("OS-EXT-SRV-ATTR:hypervisor_hostname") for s in page)
            for page in pages(compute, "/os-migrations", "migrations", nova,
                              {"changes-since": since}):
                for migration in page:
                    nodes.update((migration.get("source_node"), migration.get("dest_node")))
        except SourceError as exc:
            ctx.warn(f"every usage read: Nova's changes could not be read: {exc}")
            full = changes.ChangeWindow(None, window.last_full_at, "Nova's changes unreadable")
            return set(), datetime.now(UTC), full
        named = {n for n in nodes if n}
        ctx.detail["changed_nodes"] = len(named)
        return named, began, window


def _at_least(version: str, minimum: str) -> bool:
    """True when microversion ``version`` is ``minimum`` or later."""
    return (discover.normalize_version_number(version)
            >= discover.normalize_version_number(minimum))


def _trees_of(providers: list[dict[str, Any]], nodes: set[str]) -> set[str]:
    """Every provider in the trees whose root is named like one of ``nodes``.

    Nova names a compute node's root provider after the node
    (``hypervisor_hostname``); PCI and vGPU children hang below it.
    """
    roots = {p["uuid"] for p in providers
             if not p.get("parent_provider_uuid") and p["name"] in nodes}
    return {p["uuid"] for p in providers if (p.get("root_provider_uuid") or p["uuid"]) in roots}


def read_details(placement: Any, version: str, endpoint: str, jobs: list[Job], traits: bool,
                 concurrency: int) -> list[ProviderDetail]:
    """Each job's :class:`ProviderDetail`, in order, ``concurrency`` calls at a time.

    ``endpoint``: Placement's URL (the calls name it, so keystoneauth looks nothing up
    in the catalog); ``traits``: read each provider's traits (else they come in bulk).
    Raises SourceError for a failed call.
    """
    def read(job: Job) -> ProviderDetail:
        uuid, full, usages = job
        return _detail(placement, version, f"{endpoint}/resource_providers/{uuid}", uuid,
                       full, usages, traits=traits)

    with ThreadPoolExecutor(concurrency, thread_name_prefix="placement") as pool:
        return list(pool.map(read, jobs))


#: A reading process's placement proxy, made on its first task.
_READER: dict[str, Any] = {}


def _read_in_reader(connect: Callable[[], Any], version: str, endpoint: str, jobs: list[Job],
                    traits: bool, concurrency: int) -> list[ProviderDetail]:
    """In a reading process: :func:`read_details` through its own connection.

    Raises SourceError (which pickles, unlike some of keystoneauth's errors) when the
    connection cannot be made or a call fails.
    """
    placement = _READER.get("placement")
    if placement is None:
        try:
            placement = _READER["placement"] = connect().placement
            placement.get_endpoint()  # authenticates: a failure is said here, once
        except SourceError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to connect, said plainly
            raise SourceError(f"placement: a reading process could not connect: "
                              f"{type(exc).__name__}: {exc}") from None
    return read_details(placement, version, endpoint, jobs, traits, concurrency)


def _detail(placement, version: str, base: str, uuid: str, full: bool, usages: bool,
            traits: bool = True) -> ProviderDetail:
    """One provider's calls (``base``: its URL): all four when ``full``, else usages if asked."""
    detail = ProviderDetail(uuid)
    try:
        if usages or full:
            detail.usages = get_json(placement, f"{base}/usages", version)["usages"]
        if full:
            detail.inventories = get_json(placement, f"{base}/inventories",
                                          version)["inventories"]
            if traits:
                detail.traits = get_json(placement, f"{base}/traits", version)["traits"]
            detail.aggregates = get_json(placement, f"{base}/aggregates", version)["aggregates"]
    except SourceError as exc:
        if exc.status == 404:
            return ProviderDetail(uuid, missing=True)
        raise
    return detail


def _read_traits(placement, version: str, details: dict[str, ProviderDetail]) -> None:
    """Every provider's traits, one call per trait some provider has."""
    for detail in details.values():
        detail.traits = []
    for trait in get_json(placement, "/traits", version, {"associated": "true"})["traits"]:
        holders = get_json(placement, "/resource_providers", version,
                           {"required": trait})["resource_providers"]
        for holder in holders:
            held = details.get(holder["uuid"])
            if held is not None and not held.missing:
                held.traits.append(trait)


def _fill_stored_inventories(ctx: SyncContext, details: dict[str, ProviderDetail],
                             uuids: set[str]) -> None:
    """Stored inventories with ``used`` of the providers in ``uuids`` (generation stood)."""
    if not uuids:
        return
    table = models.ProviderInventory.__table__
    wanted = sorted(u for u in uuids if u in details)
    for uuid in wanted:
        details[uuid].inventories = {}
    for start in range(0, len(wanted), 1000):  # bounded IN lists
        for row in ctx.connection.execute(select(table).where(
                table.c.provider_uuid.in_(wanted[start:start + 1000]))).mappings():
            details[row["provider_uuid"]].inventories[  # type: ignore[index]
                row["resource_class"]] = dict(row)


def _provider_row(provider: dict[str, Any]) -> dict[str, Any]:
    """A resource_providers row."""
    return {"uuid": provider["uuid"], "name": provider["name"],
            "generation": provider["generation"],
            "root_provider_uuid": provider.get("root_provider_uuid") or provider["uuid"],
            "parent_provider_uuid": provider.get("parent_provider_uuid")}


def _write_details(ctx: SyncContext, details: list[ProviderDetail], stale: set[str],
                   traits_read: bool) -> None:
    """Snapshot the three per-provider tables; what was not read stands as stored."""
    unread = {d.uuid for d in details if d.inventories is None}
    tables = (
        (models.ProviderInventory, ("provider_uuid", "resource_class"), _inventory_rows,
         unread),
        (models.ProviderTrait, ("provider_uuid", "trait"),
         lambda d: ({"provider_uuid": d.uuid, "trait": t} for t in d.traits),
         set() if traits_read else {d.uuid for d in details} - stale),
        (models.ProviderAggregate, ("provider_uuid", "aggregate_uuid"),
         lambda d: ({"provider_uuid": d.uuid, "aggregate_uuid": a} for a in d.aggregates),
         {d.uuid for d in details} - stale),
    )
    for model, key, rows_of, standing in tables:
        snapshot = ctx.snapshot(model, key)
        for detail in details:
            if detail.uuid not in standing:
                snapshot.add(rows_of(detail))
        snapshot.keep(lambda k, standing=standing: k[0] in standing)
        snapshot.finish()


def _inventory_rows(detail: ProviderDetail):
    """provider_inventories rows: Placement's inventory fields and the usage of the class."""
    usages = detail.usages
    for resource_class, inventory in (detail.inventories or {}).items():
        yield {"provider_uuid": detail.uuid, "resource_class": resource_class,
               "total": inventory["total"], "reserved": inventory.get("reserved", 0),
               "min_unit": inventory.get("min_unit", 1),
               "max_unit": inventory.get("max_unit", inventory["total"]),
               "step_size": inventory.get("step_size", 1),
               "allocation_ratio": float(inventory.get("allocation_ratio", 1.0)),
               "used": int(inventory.get("used", 0) if usages is None
                           else usages.get(resource_class, 0))}
