"""The read-only operator dashboard at ``/ui``: fleet, hosts, GPUs, decisions, timeline.

Server-rendered Jinja templates (``cortex/api/templates``) with one stylesheet, a
few lines of JavaScript and the vendored htmx (``cortex/api/static``, see its
``VENDORED.md``); no front-end build step. Every page reads what the API already
holds: the worker's knowledge view, the decision log and the loaded pipelines. The
pictures are SVG drawn by the templates from coordinates computed here: a host's
topology (:func:`topology_layout`, over its
:class:`~cortex.knowledge.topology.HostTopology`) and the scheduling timeline
(:func:`timeline_chart`, over :func:`cortex.store.timeline.decision_timeline`'s
counts, grouped in SQL). The GPU heatmap (:func:`gpus_page`) is HTML: one square
per GPU, the knowledge's NVLink islands boxed.

Live panels: a panel that reloads itself is its own template (``_timeline_panel.html``,
``_gpus_panel.html``) included by the page inside the ``live`` macro of
``_macros.html``, which has htmx GET ``/ui/<page>/panel`` (the same query) every
``?refresh=`` seconds (default :data:`REFRESH_SECONDS`, 0: off) and swap the panel's
content. To make another panel live: move it into ``_<name>_panel.html``, build its
context in one function used by both the page and a ``/ui/<page>/panel`` handler
(:func:`_panel` renders it alone, uncached), and add that route to
``cortex.api.app.ROUTES`` with the page's policy.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import current_app, redirect, render_template, request, send_from_directory, url_for

from cortex.api.errors import ApiError
from cortex.knowledge import kpis
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.topology import Gpu, GpuLink, HostTopology, NumaCell
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.explain import explain
from cortex.pipeline.overrides import step_options
from cortex.store import timeline

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


# -- live panels ---------------------------------------------------------------------------

#: Seconds between two reloads of a live panel unless ``?refresh=`` says otherwise.
REFRESH_SECONDS = 10
_MAX_REFRESH = 3600
#: Services a decision can be of, as the decisions table spells them.
SERVICES = ("nova", "cinder", "manila", "kubernetes")


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    """The query argument ``name`` as an int from ``low`` to ``high``; ApiError 400 if not."""
    raw = request.args.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer from {low} to {high}") from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be an integer from {low} to {high}, not {value}")
    return value


def _refresh() -> int:
    """``?refresh=``: seconds between reloads of the page's live panels (0: none)."""
    return _int_arg("refresh", REFRESH_SECONDS, 0, _MAX_REFRESH)


def _panel(template: str, **context: Any):
    """A live panel's inner HTML alone (what htmx swaps in), never cached."""
    return render_template(template, **context), 200, {"Cache-Control": "no-store"}


def _query(**args: Any) -> dict[str, Any]:
    """``args`` without empty values, for ``url_for`` (the panel's own query string)."""
    return {k: v for k, v in args.items() if v not in (None, "")}


# -- the scheduling timeline ---------------------------------------------------------------

#: Windows offered in the timeline's form, in hours (any 1..MAX_HOURS may be asked for).
TIMELINE_HOURS = (1, 3, 6, 12, 24, 72, 168, 720)
#: (service, pipeline) series drawn with a colour of their own; the rest are "other".
MAX_SERIES = 8
_CHART_W, _CHART_H = 960, 260
_LEFT, _TOP_MARGIN, _RIGHT, _BOTTOM = 48, 18, 12, 30
#: Outcomes stacked in their series' colour, and the marked ones, bottom to top.
_COUNTED, _MARKED = ("ok", "simulated"), ("rejected", "error")
_MARK_LABELS = {"rejected": "refused (4xx)", "error": "error (503)"}
#: Seconds between two labelled times of the x axis: the first giving at most 8 labels.
_TICKS = (300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def _timeline_args() -> dict[str, Any]:
    """The timeline's query: ``hours``, ``service``, ``pipeline``, ``refresh`` (400 if bad)."""
    hours = _int_arg("hours", 1, 1, timeline.MAX_HOURS)
    service = request.args.get("service", "").strip()
    if service and service not in SERVICES:
        raise ApiError(400, f"service must be one of {', '.join(SERVICES)}")
    pipeline = request.args.get("pipeline", "").strip()
    if len(pipeline) > 255:
        raise ApiError(400, "pipeline must be at most 255 characters")
    return {"hours": hours, "service": service, "pipeline": pipeline, "refresh": _refresh()}


def _timeline_context() -> dict[str, Any]:
    """What the timeline page and its panel show: the counts as a chart and a table."""
    args = _timeline_args()
    now = datetime.now(UTC)
    with current_app.extensions["cortex"].engine.connect() as connection:
        counted = timeline.decision_timeline(connection, args["hours"], now,
                                             service=args["service"] or None,
                                             pipeline=args["pipeline"] or None)
    query = _query(hours=args["hours"], service=args["service"], pipeline=args["pipeline"],
                   refresh=args["refresh"] if args["refresh"] != REFRESH_SECONDS else None)
    return {"args": args, "chart": timeline_chart(counted), "totals": timeline_totals(counted),
            "updated": now, "step": counted.step,
            "panel_url": url_for("/ui/timeline/panel", **query)}


def timeline_page():
    """``GET /ui/timeline``: decisions over time per service and pipeline, refusals marked.

    Query: ``hours`` (1 to 720, default 1; the bucket width follows, 1 minute for the
    last hour), ``service``, ``pipeline`` (filters), ``refresh`` (seconds between
    reloads of the chart, 0 to 3600, default 10; 0: none). A bad value answers 400.
    """
    context = _timeline_context()
    hours = sorted(set(TIMELINE_HOURS) | {context["args"]["hours"]})
    pipelines = sorted(current_app.extensions["cortex"].pipelines.pipelines)
    return _page("timeline.html", services=SERVICES, pipelines=pipelines, hour_options=hours,
                 **context)


def timeline_panel():
    """``GET /ui/timeline/panel``: the timeline's chart and table alone (htmx polls it)."""
    return _panel("_timeline_panel.html", **_timeline_context())


def _series_name(service: str, pipeline: str | None) -> str:
    """``nova · kvm-gpu-topology-aware`` (``(no pipeline)`` for calls refused before one)."""
    return f"{service} · {pipeline or '(no pipeline)'}"


def timeline_totals(counted: timeline.Timeline) -> list[dict[str, Any]]:
    """Decisions in the window per (service, pipeline), the most first.

    Each ``{service, pipeline, name, ok, simulated, rejected, error, total}``: counts.
    """
    rows: dict[tuple[str, str | None], dict[str, Any]] = {}
    for (service, pipeline, outcome), counts in counted.counts.items():
        row = rows.setdefault((service, pipeline), {
            "service": service, "pipeline": pipeline, "name": _series_name(service, pipeline),
            "ok": 0, "simulated": 0, "rejected": 0, "error": 0, "total": 0})
        row[outcome] = row.get(outcome, 0) + sum(counts)
        row["total"] += sum(counts)
    return sorted(rows.values(), key=lambda r: (-r["total"], r["name"]))


def timeline_chart(counted: timeline.Timeline) -> dict[str, Any]:
    """The timeline as stacked bars: coordinates for the SVG the template draws.

    Per bucket, bottom to top: one bar segment per (service, pipeline) series counting
    its ``ok`` and ``simulated`` decisions (the :data:`MAX_SERIES` busiest series in
    colours ``s0``.., the rest as ``other``), then the bucket's refusals (``rejected``,
    4xx, hatched orange) and errors (``error``, 503, red) of all series, each also
    flagged by a triangle above the bar. Returns ``{width, height, plot: {x, y, w, h},
    series: [{name, css, total}], bars: [{x, y, w, h, css}], marks: [{path, css,
    title}], hovers: [{x, w, title}], yticks: [{y, label}], xticks: [{x, label}],
    peak, empty}`` in SVG user units (pixels at 100 %); only non-empty segments.
    """
    n = counted.buckets
    per_series: dict[tuple[str, str | None], list[int]] = {}
    marked = {outcome: [0] * n for outcome in _MARKED}
    lines: list[list[str]] = [[] for _ in range(n)]
    for (service, pipeline, outcome), counts in counted.counts.items():
        if outcome in _MARKED:
            target = marked[outcome]
        else:
            target = per_series.setdefault((service, pipeline), [0] * n)
        for i, count in enumerate(counts):
            if count:
                target[i] += count
                lines[i].append(f"{_series_name(service, pipeline)}: {count} {outcome}")
    ranked = sorted(per_series.items(), key=lambda kv: (-sum(kv[1]), _series_name(*kv[0])))
    series = [{"name": _series_name(*key), "css": f"s{i}", "values": values}
              for i, (key, values) in enumerate(ranked[:MAX_SERIES])]
    if ranked[MAX_SERIES:]:
        series.append({"name": f"other ({len(ranked) - MAX_SERIES} series)", "css": "other",
                       "values": [sum(v[i] for _, v in ranked[MAX_SERIES:]) for i in range(n)]})
    stacks = series + [{"name": _MARK_LABELS[o], "css": o, "values": marked[o]}
                       for o in _MARKED]
    heights = [sum(s["values"][i] for s in stacks) for i in range(n)]
    peak = _nice_ceiling(max(heights, default=0))
    plot = {"x": _LEFT, "y": _TOP_MARGIN, "w": _CHART_W - _LEFT - _RIGHT,
            "h": _CHART_H - _TOP_MARGIN - _BOTTOM}
    slot = plot["w"] / n
    gap = slot * 0.15 if slot >= 4 else 0.0
    bottom = plot["y"] + plot["h"]
    bars, marks, hovers = [], [], []
    for i in range(n):
        x, y = plot["x"] + i * slot, float(bottom)
        for stack in stacks:
            count = stack["values"][i]
            if count:
                height = count / peak * plot["h"]
                y -= height
                bars.append({"x": x + gap / 2, "y": y, "w": slot - gap, "h": height,
                             "css": stack["css"]})
        centre = x + slot / 2
        for outcome in _MARKED:
            if marked[outcome][i]:
                y -= 9
                marks.append({"path": f"M {centre - 4:.1f} {y:.1f} h 8 l -4 7 z", "css": outcome,
                              "title": f"{_bucket_label(counted, i)}: {marked[outcome][i]} "
                                       f"{_MARK_LABELS[outcome]}"})
        if heights[i]:
            detail = "\n".join(sorted(lines[i])[:12]) + ("\n…" if len(lines[i]) > 12 else "")
            hovers.append({"x": x, "w": slot, "title": f"{_bucket_label(counted, i)}: "
                                                        f"{heights[i]} decisions\n{detail}"})
    ticks = {0, peak} | ({peak // 2} if peak % 2 == 0 else set())
    yticks = [{"y": bottom - v / peak * plot["h"], "label": str(v)} for v in sorted(ticks)]
    fmt = "%H:%M" if counted.step * n <= 86400 else "%d %b %H:%M"
    every = next((t for t in _TICKS if t % counted.step == 0 and counted.step * n / t <= 8),
                 _TICKS[-1])
    first = int(counted.start.timestamp())
    xticks = [{"x": plot["x"] + i * slot, "label": counted.bucket_start(i).strftime(fmt)}
              for i in range(n) if (first + i * counted.step) % every == 0]
    return {"width": _CHART_W, "height": _CHART_H, "plot": plot, "bottom": bottom,
            "series": [{"name": s["name"], "css": s["css"], "total": sum(s["values"])}
                       for s in stacks],
            "bars": bars, "marks": marks, "hovers": hovers, "yticks": yticks,
            "xticks": xticks, "peak": peak, "empty": not any(heights)}


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is at least ``value`` (1 for 0)."""
    nice, factors = 1, itertools.cycle((2, 2.5, 2))
    while nice < value:
        nice = round(nice * next(factors))
    return nice


def _bucket_label(counted: timeline.Timeline, index: int) -> str:
    """``11:42–11:43 UTC`` (with the day when the window is longer than one)."""
    start, end = counted.bucket_start(index), counted.bucket_start(index + 1)
    fmt = "%H:%M" if counted.step * counted.buckets <= 86400 else "%d %b %H:%M"
    return f"{start.strftime(fmt)}–{end.strftime(fmt)} UTC"


# -- the GPU occupancy heatmap --------------------------------------------------------------

#: States of a GPU cell, as CSS classes and in the legend's order.
GPU_STATES = ("free", "used", "partial", "unhealthy")
GPU_STATE_LABELS = {"free": "free", "used": "used", "partial": "MIG / vGPU, partly used",
                    "unhealthy": "unhealthy"}
#: Host rows per page of the heatmap: the default and the most one may ask for.
HEATMAP_ROWS, MAX_HEATMAP_ROWS = 100, 250
_HEATMAP_MEMO: list[Any] = [None]


def gpu_state(gpu: Gpu) -> str:
    """The heatmap state of one GPU (:data:`GPU_STATES`).

    ``unhealthy`` when the agent says so (whatever its use); a GPU split by MIG is
    ``used`` when all its instances are, else ``partial``; a vGPU host GPU (time
    sliced) holding vGPUs is ``partial``; otherwise ``used`` or ``free`` as
    ``in_use`` says.
    """
    if not gpu.healthy:
        return "unhealthy"
    if gpu.mig_mode == "enabled" or gpu.mig_instances:
        busy = sum(1 for i in gpu.mig_instances if i.in_use)
        return "used" if gpu.mig_instances and busy == len(gpu.mig_instances) else "partial"
    if gpu.in_use:
        return "used"
    if gpu.vgpus_in_use > 0:
        return "partial"
    return "free"


def _topology_model(gpu: Gpu) -> str:
    """The GPU's model as the fleet page names it (``H100 SXM5 80GB``), else its name."""
    named = (gpu.name or "").removeprefix("NVIDIA ").strip()
    if gpu.device_id:
        model = kpis.gpu_model(f"CUSTOM_PCI_{gpu.vendor_id.upper()}_{gpu.device_id.upper()}")
        if model and (not model.startswith("PCI ") or not named):
            return model
    return named or "GPU"


@dataclass(frozen=True)
class GpuHost:
    """A heatmap row before drawing: the host, its zone, GPU models and state counts.

    ``source`` is ``agent`` (cells from the topology report) or ``placement`` (no
    report: cells from the passthrough GPU inventories' used and free units).
    """

    host: Any
    zone: str
    models: tuple[str, ...]
    counts: dict[str, int]
    source: str


def gpu_hosts(view: KnowledgeView) -> list[GpuHost]:
    """Every host with GPUs, by name, counted once per knowledge view (kept for the next).

    Hosts with a topology report count their reported GPUs; hosts without one, their
    passthrough GPU inventories (``CUSTOM_PCI_*``: used units as ``used``, the rest
    ``free``); vGPU-only hosts without a report are left out (no per-GPU facts).
    """
    memo = _HEATMAP_MEMO[0]
    if memo is not None and memo[0] is view:
        return memo[1]
    rows = []
    for host in sorted(view.hosts.values(), key=lambda h: h.host):
        topology = host.topology
        if topology is not None and topology.gpus:
            counts = dict.fromkeys(GPU_STATES, 0)
            for gpu in topology.gpus:
                counts[gpu_state(gpu)] += 1
            models = tuple(sorted({_topology_model(g) for g in topology.gpus}))
            rows.append(GpuHost(host, kpis.zone_of(host), models, counts, "agent"))
            continue
        placed = [(model, inv) for model, whole, inv in kpis.host_gpus(host) if whole]
        if placed:
            used = sum(min(int(inv.used), int(inv.total)) for _, inv in placed)
            total = sum(int(inv.total) for _, inv in placed)
            counts = dict.fromkeys(GPU_STATES, 0) | {"used": used, "free": total - used}
            rows.append(GpuHost(host, kpis.zone_of(host),
                                tuple(sorted({m for m, _ in placed})), counts, "placement"))
    _HEATMAP_MEMO[0] = (view, rows)
    return rows


def heatmap_row(row: GpuHost) -> dict[str, Any]:
    """One drawn row: ``{host, zone, status, models, counts, source, islands}``.

    ``islands`` are the host's NVLink islands as the knowledge computes them
    (:attr:`~cortex.knowledge.topology.HostTopology.nvlink_islands`), in the order of
    their first GPU: ``{nvlink, cells: [{state, title}]}``; a GPU without NVLink is an
    island of its own with ``nvlink`` False. Hosts known from Placement only have one
    island of counted cells.
    """
    host = row.host
    base = {"host": host.host, "zone": row.zone, "status": _status(host),
            "models": row.models, "counts": row.counts, "source": row.source}
    if row.source == "placement":
        cells = ([{"state": "used", "title": "used (Placement)"}] * row.counts["used"]
                 + [{"state": "free", "title": "free (Placement)"}] * row.counts["free"])
        return base | {"islands": [{"nvlink": False, "cells": cells}]}
    topology = host.topology
    order = {g.pci_address: i for i, g in enumerate(topology.gpus)}
    by_address = {g.pci_address: g for g in topology.gpus}
    islands = []
    for island in sorted(topology.nvlink_islands, key=lambda s: min(order[a] for a in s)):
        members = sorted(island, key=order.__getitem__)
        islands.append({"nvlink": len(members) > 1,
                        "cells": [_gpu_cell(by_address[a], len(row.models) > 1)
                                  for a in members]})
    return base | {"islands": islands}


def _gpu_cell(gpu: Gpu, mixed: bool) -> dict[str, str]:
    """A GPU's cell: its state and a short tooltip (address, use, MIG, vGPUs, health).

    The model is named only on a host of ``mixed`` models (the row names it otherwise).
    """
    state = gpu_state(gpu)
    parts = [gpu.pci_address, *([_topology_model(gpu)] if mixed else []),
             GPU_STATE_LABELS[state]]
    if gpu.mig_instances:
        busy = sum(1 for i in gpu.mig_instances if i.in_use)
        parts.append(f"MIG {busy}/{len(gpu.mig_instances)} instances in use")
    elif gpu.mig_mode == "enabled":
        parts.append("MIG enabled, no instances")
    if gpu.vgpus_in_use:
        parts.append(f"{gpu.vgpus_in_use} vGPUs")
    if gpu.health_reasons:
        parts.append("; ".join(gpu.health_reasons))
    return {"state": state, "title": " · ".join(parts)}


def _heatmap_context() -> dict[str, Any]:
    """The heatmap's filters, page of rows, totals and pages; 400 for bad arguments."""
    zone = request.args.get("az", "").strip()
    model = request.args.get("model", "").strip()
    per_page = _int_arg("per_page", HEATMAP_ROWS, 1, MAX_HEATMAP_ROWS)
    page = _int_arg("page", 1, 1, 10**6)
    refresh = _refresh()
    everything = gpu_hosts(_view())
    zones = sorted({r.zone for r in everything})
    models = sorted({m for r in everything for m in r.models})
    rows = [r for r in everything if (not zone or r.zone == zone)
            and (not model or model in r.models)]
    pages = max(1, math.ceil(len(rows) / per_page))
    page = min(page, pages)
    shown = rows[(page - 1) * per_page:page * per_page]
    totals = dict.fromkeys(GPU_STATES, 0)
    for row in rows:
        for state, count in row.counts.items():
            totals[state] += count
    filters = {"az": zone, "model": model,
               "per_page": per_page if per_page != HEATMAP_ROWS else None}
    query = _query(**filters, page=page if page > 1 else None,
                   refresh=refresh if refresh != REFRESH_SECONDS else None)
    return {"rows": [heatmap_row(r) for r in shown], "matching": len(rows),
            "totals": totals, "gpus": sum(totals.values()), "page": page, "pages": pages,
            "per_page": per_page, "zone": zone, "model": model, "zones": zones,
            "models": models, "refresh": refresh, "filters": _query(**filters),
            "states": GPU_STATES, "state_labels": GPU_STATE_LABELS,
            "updated": datetime.now(UTC), "panel_url": url_for("/ui/gpus/panel", **query)}


def gpus_page():
    """``GET /ui/gpus``: hosts x GPUs, each cell free, used, MIG/vGPU or unhealthy.

    NVLink islands are boxed. Query: ``az`` and ``model`` (filters: a zone and a model
    as the fleet page names them; no match is an empty page), ``page`` and
    ``per_page`` (1 to 250 host rows, default 100: a 10,000-host fleet is 100 pages of
    bounded HTML), ``refresh`` (seconds between reloads, 0 to 3600, default 10; 0:
    none). A bad number answers 400.
    """
    return _page("gpus.html", **_heatmap_context())


def gpus_panel():
    """``GET /ui/gpus/panel``: the heatmap's rows alone, same query (htmx polls it)."""
    return _panel("_gpus_panel.html", **_heatmap_context())
