"""The read-only operator dashboard at ``/ui``: fleet, hosts, decisions, pipelines.

Server-rendered Jinja templates (``cortex/api/templates``) with one stylesheet and a
few lines of JavaScript (``cortex/api/static``); no front-end build step. Every
page reads what the API already holds: the worker's knowledge view, the decision
log and the loaded pipelines. The pictures of a host's topology are SVG drawn by
the template from :func:`topology_layout`, over the host's
:class:`~cortex.knowledge.topology.HostTopology`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import current_app, redirect, render_template, request, send_from_directory, url_for

from cortex.api.errors import ApiError
from cortex.knowledge import kpis
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.topology import GpuLink, HostTopology, NumaCell
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.explain import explain
from cortex.pipeline.overrides import step_options

STATIC = Path(__file__).parent / "static"
#: Abbreviations of NVML's P2P levels, as ``nvidia-smi topo -m`` prints them.
LEVELS = {"INTERNAL": "X", "SINGLE": "PIX", "MULTIPLE": "PXB", "HOSTBRIDGE": "PHB",
          "NODE": "NODE", "SYSTEM": "SYS"}
# PCIe levels close enough to draw as a line (the GPUs share a PCIe switch).
_DRAWN_LEVELS = ("SINGLE", "MULTIPLE")
_GPU_W, _GPU_H, _GAP, _TOP = 118, 52, 16, 96
_MAX_MATRIX_ROWS = 200
#: Binary units above the unit Placement counts a resource class in (MiB, GiB).
_BINARY_UNITS = {"MEMORY_MB": ("MiB", "GiB", "TiB", "PiB"), "DISK_GB": ("GiB", "TiB", "PiB")}
#: Names of counted resource classes, singular and plural.
_COUNTS = {"VCPU": ("vCPU", "vCPUs"), "PCPU": ("CPU", "CPUs")}


def quantity(value: float, resource_class: str) -> str:
    """``value`` units of ``resource_class`` for people: the Jinja filter ``quantity``.

    The input is in Placement's unit of the class: ``MEMORY_MB`` in MiB, ``DISK_GB``
    (and Cinder/Manila pool capacities) in GiB, ``VCPU`` and ``PCPU`` in CPUs. Memory
    and disk come out in the largest binary unit (steps of 1024) that keeps the number
    at 1 or more, with two decimals under 10, one under 100, none above, trailing zeros
    dropped (2031616 MiB -> ``1.94 TiB``, 524288 MiB -> ``512 GiB``); CPUs as a count
    (``64 vCPUs``, ``1 CPU``); any other class (GPUs, custom classes) as a plain number
    (``8``, ``2.5``), never in exponent notation. Negative values (an overcommitted
    ``free``) keep their sign. Never raises for a number.
    """
    units = _BINARY_UNITS.get(resource_class)
    if units is None:
        count = _decimals(value, 2)
        if resource_class not in _COUNTS:
            return count
        singular, plural = _COUNTS[resource_class]
        return f"{count} {singular if value == 1 else plural}"
    size, unit = abs(value), units[0]
    for unit in units:
        if size < 1024 or unit == units[-1]:
            break
        size /= 1024
    digits = 0 if size >= 100 else 1 if size >= 10 else 2
    return f"{'-' if value < 0 else ''}{_decimals(size, digits)} {unit}"


def _decimals(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, trailing zeros (and a bare point) dropped."""
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def to_fleet():
    """``GET /ui/``: a permanent redirect (308) to ``/ui``, keeping the query string."""
    query = request.query_string.decode()
    return redirect(url_for("/ui") + (f"?{query}" if query else ""), 308)


def static_file(name: str):
    """``GET /ui/static/<name>``: the dashboard's stylesheet and script."""
    return send_from_directory(STATIC, name, max_age=300)


def _view() -> KnowledgeView:
    """The worker's current view (the last good one if the database is away)."""
    cache = current_app.extensions["cortex"].knowledge
    try:
        return cache.view()
    except KnowledgeUnavailable as exc:
        if cache.current is None:
            raise ApiError(503, f"knowledge unavailable: {exc}") from None
        return cache.current


def _page(template: str, **context: Any) -> str:
    """Render ``template`` with what every page shows in its header."""
    cache = current_app.extensions["cortex"].knowledge
    view = cache.current
    return render_template(template, knowledge_version=view.version if view else None,
                           knowledge_age=cache.age(), problem=cache.problem(), **context)


def fleet():
    """``GET /ui``: hosts per availability zone, utilization, GPUs per model."""
    view = _view()
    zones: dict[str, list[dict[str, Any]]] = {}
    for host in sorted(view.hosts.values(), key=lambda h: h.host):
        zones.setdefault(kpis.zone_of(host), []).append(_host_row(host))
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
    return _page("fleet.html", zones=summaries, gpus=gpus, sizes=kpis.REQUEST_SIZES,
                 classes=kpis.MAIN_RESOURCE_CLASSES, pools=_pools(view))


def _status(host: Any) -> str:
    """``up``, ``disabled`` or ``down`` (disabled wins: an operator said so)."""
    return "disabled" if not host.enabled else ("up" if host.up else "down")


def _host_row(host: Any) -> dict[str, Any]:
    """One row of the fleet table."""
    gpus: dict[str, list[int]] = {}
    for model, _, inventory in kpis.host_gpus(host):
        free_total = gpus.setdefault(model, [0, 0])
        free_total[0] += kpis.free_units(inventory)
        free_total[1] += int(inventory.capacity)
    return {"host": host.host, "status": _status(host), "usage": kpis.host_usage(host),
            "gpus": gpus, "topology": host.topology is not None}


def _pools(view: KnowledgeView) -> list[dict[str, Any]]:
    """Cinder and Manila pools with their free capacity, for the fleet page."""
    return [{"service": service, "name": pool.name, "zone": pool.availability_zone,
             "usage": kpis.Usage(pool.total_capacity_gb - pool.free_capacity_gb,
                                 pool.total_capacity_gb)}
            for service, pools in sorted(view.pools.items())
            for pool in sorted(pools.values(), key=lambda p: p.name)]


def host_page(host: str):
    """``GET /ui/hosts/<host>``: state, nodes and inventories, instances, topology."""
    state = _view().hosts.get(host)
    if state is None:
        raise ApiError(404, f"no host {host} in the knowledge view")
    topology = state.topology
    return _page("host.html", host=state, status=_status(state), usage=kpis.host_usage(state),
                 gpus=kpis.host_gpus(state), topology=topology,
                 layout=topology_layout(topology) if topology else None,
                 matrix=topology_matrix(topology) if topology else None)


@dataclass(frozen=True)
class Box:
    """A rectangle of the topology picture with its label lines."""

    x: float
    y: float
    width: float
    height: float
    lines: tuple[str, ...]
    css: str


def topology_layout(topology: HostTopology) -> dict[str, Any]:
    """Coordinates of the host picture: NUMA cells on top, their GPUs below, links.

    GPUs sit in one row, grouped under their cell (unknown cell last); NVLinks are
    drawn as arcs under the row (width by link count), PCIe links between GPUs behind
    one switch (``PIX``/``PXB``) as dashed arcs; when every pair of three or more
    GPUs is NVLink-joined (NVSwitch) one bar stands for all of them. Returns
    ``{width, height, cells, gpus, arcs, bar, bottom, mig}`` for the template; ``mig``
    lists ``(PCI address, instance labels)`` of the GPUs split by MIG.
    """
    groups = [(c, [g for g in topology.gpus if g.numa_node == c.id]) for c in topology.cells]
    known = {c.id for c in topology.cells}
    orphans = [g for g in topology.gpus if g.numa_node not in known]
    if orphans:
        groups.append((None, orphans))
    cells, gpus, centre, x = [], [], {}, 10.0
    for cell, members in groups:
        width = max(len(members), 1) * (_GPU_W + _GAP) - _GAP
        cells.append(Box(x, 10, width, 64, _cell_lines(cell), "cell"))
        for i, gpu in enumerate(members):
            gx = x + i * (_GPU_W + _GAP)
            css = "gpu " + ("used" if gpu.in_use else "free") + ("" if gpu.healthy
                                                                 else " unhealthy")
            name = (gpu.name or "GPU").removeprefix("NVIDIA ")[:17]
            gpus.append(Box(gx, _TOP, _GPU_W, _GPU_H, (name, gpu.pci_address,
                                                       "in use" if gpu.in_use else "free"), css))
            centre[gpu.pci_address] = gx + _GPU_W / 2
        x += width + 3 * _GAP
    arcs, bar = _arcs(topology, centre)
    depth = max((a["depth"] for a in arcs), default=0)
    height = _TOP + _GPU_H + max(depth, 40 if bar else 0) + 30
    mig = [(g.pci_address, [f"{i.profile}{' (in use)' if i.in_use else ''}"
                            for i in g.mig_instances]) for g in topology.gpus if g.mig_instances]
    return {"width": max(x, 300), "height": height, "cells": cells, "gpus": gpus,
            "arcs": arcs, "bar": bar, "bottom": _TOP + _GPU_H, "mig": mig}


def _cell_lines(cell: NumaCell | None) -> tuple[str, ...]:
    """Label of a NUMA cell box."""
    if cell is None:
        return ("NUMA cell unknown",)
    socket = f", socket {cell.socket}" if cell.socket is not None else ""
    memory = (f"{quantity(cell.memory, 'MEMORY_MB')}, "
              f"{quantity(cell.memory_usage, 'MEMORY_MB')} used")
    return (f"NUMA {cell.id}{socket}",
            f"{len(cell.cpus)} CPUs, {len(cell.pcpuset)} dedicated, "
            f"{len(cell.pinned_cpus)} pinned", memory)


def pair_links(topology: HostTopology) -> list[GpuLink]:
    """Each GPU pair's link once (the topology maps both orders), by address pair."""
    return sorted((k for (a, b), k in topology.links.items() if a < b),
                  key=lambda k: tuple(sorted((k.a, k.b))))


def _arcs(topology: HostTopology, centre: dict[str, float]):
    """Arcs between GPU centres, or an NVSwitch bar when all pairs have NVLink."""
    addresses = [g.pci_address for g in topology.gpus]
    links = pair_links(topology)
    nvlinked = {frozenset((k.a, k.b)) for k in links if k.nvlink > 0}
    all_pairs = len(addresses) >= 3 and all(
        frozenset((a, b)) in nvlinked for i, a in enumerate(addresses) for b in addresses[i + 1:])
    bottom = _TOP + _GPU_H
    if all_pairs:
        counts = sorted({k.nvlink for k in links if k.nvlink > 0})
        xs = [centre[a] for a in addresses]
        return [], {"x1": min(xs), "x2": max(xs), "y": bottom + 30, "xs": xs,
                    "label": f"NVLink all-to-all ({'/'.join(map(str, counts))} links per pair)"}
    arcs = []
    for link in links:
        if link.a not in centre or link.b not in centre:
            continue
        if link.nvlink <= 0 and link.topology not in _DRAWN_LEVELS:
            continue
        x1, x2 = sorted((centre[link.a], centre[link.b]))
        depth = 18 + (x2 - x1) / 5
        arcs.append({"path": f"M {x1:.0f} {bottom} Q {(x1 + x2) / 2:.0f} {bottom + 2 * depth:.0f}"
                             f" {x2:.0f} {bottom}",
                     "css": "nvlink" if link.nvlink > 0 else "pcie",
                     "width": 1.5 + min(link.nvlink, 18) / 4 if link.nvlink > 0 else 1.2,
                     "depth": depth, "title": _link_title(link)})
    return arcs, None


def _link_title(link: GpuLink) -> str:
    """Tooltip of a link."""
    kind = f"{link.nvlink} NVLinks" if link.nvlink > 0 else "no NVLink"
    a, b = sorted((link.a, link.b))
    return f"{a} - {b}: {kind}, PCIe {link.topology or 'unknown'}"


def topology_matrix(topology: HostTopology) -> dict[str, Any]:
    """``nvidia-smi topo -m`` style matrix: ``NV<n>`` or the PCIe level per GPU pair."""
    addresses = [g.pci_address for g in topology.gpus]
    rows = []
    for a in addresses:
        cells = []
        for b in addresses:
            link = topology.link(a, b)
            if a == b:
                cells.append("X")
            elif link is None:
                cells.append("?")
            else:
                cells.append(f"NV{link.nvlink}" if link.nvlink > 0
                             else LEVELS.get(link.topology or "", link.topology or "?"))
        rows.append((a, cells))
    return {"addresses": addresses, "rows": rows}


def decisions_page():
    """``GET /ui/decisions``: recent decisions, filtered by the query's fields."""
    fields = {k: request.args.get(k, "").strip()
              for k in ("service", "pipeline", "outcome", "intent", "resource_id", "request_id")}
    try:
        limit = min(max(int(request.args.get("limit", 50)), 1), 500)
    except ValueError:
        raise ApiError(400, "limit must be an integer") from None
    store = current_app.extensions["cortex"].decision_store
    found = store.find(resource_id=fields["resource_id"] or None,
                       request_id=fields["request_id"] or None, limit=limit,
                       service=fields["service"], pipeline=fields["pipeline"],
                       outcome=fields["outcome"], intent=fields["intent"])
    pipelines = sorted(current_app.extensions["cortex"].pipelines.pipelines)
    return _page("decisions.html", decisions=[d.as_document() for d in found], fields=fields,
                 limit=limit,
                 pipelines=pipelines)


def decision_page(decision_id: str):
    """``GET /ui/decisions/<id>``: the explanation and the per-step table."""
    decision = current_app.extensions["cortex"].decision_store.get(decision_id)
    if decision is None:
        raise ApiError(404, f"no decision {decision_id}")
    document = decision.as_document()
    steps = [s.as_dict() for s in decision.steps if s.status == "ran"]
    hosts = list(dict.fromkeys((*(decision.result or ()), *decision.hosts)))
    return _page("decision.html", decision=document, explanation=explain(decision),
                 steps=steps, hosts=hosts[:_MAX_MATRIX_ROWS],
                 more_hosts=max(len(hosts) - _MAX_MATRIX_ROWS, 0),
                 unknown=set(decision.unknown_hosts),
                 document=json.dumps(document, indent=2, default=str))


def descheduler_page():
    """``GET /ui/descheduler``: the latest moves of cortex-descheduler, newest first."""
    from cortex.store.moves import list_moves

    try:
        limit = min(max(int(request.args.get("limit", 100)), 1), 1000)
    except ValueError:
        raise ApiError(400, "limit must be an integer") from None
    with current_app.extensions["cortex"].engine.connect() as connection:
        moves = list_moves(connection, limit)
    counts: dict[str, int] = {}
    for move in moves:
        counts[move["state"]] = counts.get(move["state"], 0) + 1
    return _page("descheduler.html", moves=moves, counts=sorted(counts.items()), limit=limit)


def pipelines_page():
    """``GET /ui/pipelines``: every pipeline's steps, options and multipliers; the rules."""
    pipelines = current_app.extensions["cortex"].pipelines
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
    return _page("pipelines.html", pipelines=shown, rules=rules)
