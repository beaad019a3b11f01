"""The fleet and pipelines pages' tables: hosts per zone, GPUs per model, pools, steps.

Read from the worker's knowledge view (:mod:`cortex.knowledge.kpis`) and its loaded
pipelines.
"""

from __future__ import annotations

import json
from typing import Any

from cortex.knowledge import kpis
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import PipelineSet
from cortex.pipeline.overrides import step_options


def host_status(host: Any) -> str:
    """``up``, ``disabled`` or ``down`` (disabled wins: an operator said so)."""
    return "disabled" if not host.enabled else ("up" if host.up else "down")


def host_row(host: Any) -> dict[str, Any]:
    """One row of the fleet table."""
    gpus: dict[str, list[int]] = {}
    for model, _, inventory in kpis.host_gpus(host):
        free_total = gpus.setdefault(model, [0, 0])
        free_total[0] += kpis.free_units(inventory)
        free_total[1] += int(inventory.capacity)
    return {"host": host.host, "status": host_status(host), "usage": kpis.host_usage(host),
            "gpus": gpus, "topology": host.topology is not None}


def pools(view: KnowledgeView) -> list[dict[str, Any]]:
    """Cinder and Manila pools with their free capacity, for the fleet page."""
    return [{"service": service, "name": pool.name, "zone": pool.availability_zone,
             "usage": kpis.Usage(pool.total_capacity_gb - pool.free_capacity_gb,
                                 pool.total_capacity_gb)}
            for service, pools in sorted(view.pools.items())
            for pool in sorted(pools.values(), key=lambda p: p.name)]


def fleet_tables(view: KnowledgeView) -> dict[str, Any]:
    """The fleet page's context: zones, GPUs per model, resource classes, pools.

    ``zones``: hosts, schedulable count and usage per class; ``gpus``: free, used and
    stranded per model and zone; ``sizes``, ``classes``, ``pools``.
    """
    zones: dict[str, list[dict[str, Any]]] = {}
    for host in sorted(view.hosts.values(), key=lambda h: h.host):
        zones.setdefault(kpis.zone_of(host), []).append(host_row(host))
    zone_usage = kpis.zone_usage(view)
    summaries = [{"name": zone, "hosts": rows,
                  "schedulable": sum(1 for r in rows if r["status"] == "up"),
                  "usage": {rc: zone_usage.get((zone, rc)) for rc in kpis.MAIN_RESOURCE_CLASSES
                            if (zone, rc) in zone_usage}}
                 for zone, rows in sorted(zones.items())]
    stranded = kpis.stranded_gpus(view)
    gpus = [{"model": c.model, "zone": c.availability_zone, "free": c.free, "used": c.used,
             "stranded": {size: stranded.get((c.model, c.availability_zone, size))
                          for size in kpis.REQUEST_SIZES}}
            for c in kpis.gpu_counts(view)]
    return {"zones": summaries, "gpus": gpus, "sizes": kpis.REQUEST_SIZES,
            "classes": kpis.MAIN_RESOURCE_CLASSES, "pools": pools(view)}


def pipeline_tables(pipelines: PipelineSet) -> dict[str, Any]:
    """The pipelines page's context: ``pipelines`` (steps, options, multipliers) and ``rules``."""
    shown = [{"name": p.name, "service": p.service, "description": p.description,
              "unknown_hosts": p.unknown_hosts,
              "defaults": [s for s, n in pipelines.defaults.items() if n == p.name],
              "steps": [{"kind": s.kind, "name": s.name, "multiplier": s.multiplier,
                         "on_error": s.on_error, "shadow": s.shadow,
                         "max_duration_ms": s.max_duration_ms,
                         "options": json.dumps(step_options(s), sort_keys=True)}
                        for s in p.filters + p.weighers]}
             for p in pipelines.pipelines.values()]
    rules = [{"pipeline": r.pipeline, "service": r.service,
              "match": json.dumps(dict(r.match), sort_keys=True)} for r in pipelines.rules]
    return {"pipelines": shown, "rules": rules}
