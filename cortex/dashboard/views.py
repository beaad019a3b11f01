"""The dashboard's pages and live panels: parse the query, read, render.

Each handler reads through the worker's services (the knowledge view, the decision
store, :mod:`cortex.services.history`, :mod:`cortex.services.forecasts`) and renders a
template of ``cortex/dashboard/templates``; a bad query argument answers 400, a page
of nothing known 404, no knowledge 503 (werkzeug's HTTP errors, which the API answers
in its error shape).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flask import current_app, redirect, render_template, request, send_from_directory, url_for
from werkzeug.exceptions import BadRequest, NotFound, ServiceUnavailable

from cortex.dashboard.fleet import fleet_tables, host_status, pipeline_tables
from cortex.dashboard.forecasts import MAX_CHARTS, forecast_chart, soonest
from cortex.dashboard.gpus import GPU_STATE_LABELS, GPU_STATES, gpu_hosts, heatmap_row
from cortex.dashboard.timeline import timeline_chart, timeline_totals
from cortex.dashboard.topology import topology_layout, topology_matrix
from cortex.knowledge import kpis
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.energy import EnergySettings, zone_energy
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.explain import explain
from cortex.services import forecasts, history
from cortex.services.capacity import flavor_supply
from cortex.services.errors import DatabaseUnreachable

STATIC = Path(__file__).parent / "static"
#: Hosts a decision's page shows at most.
_MAX_MATRIX_ROWS = 200


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
            raise ServiceUnavailable(f"knowledge unavailable: {exc}") from None
        return cache.current


def _page(template: str, **context: Any) -> str:
    """Render ``template`` with what every page shows in its header."""
    cache = current_app.extensions["cortex"].knowledge
    view = cache.current
    return render_template(template, knowledge_version=view.version if view else None,
                           knowledge_age=cache.age(), problem=cache.problem(), **context)


def fleet():
    """``GET /ui``: hosts per availability zone, utilization, GPUs per model."""
    return _page("fleet.html", **fleet_tables(_view()))


def host_page(host: str):
    """``GET /ui/hosts/<host>``: state, nodes and inventories, instances, topology."""
    state = _view().hosts.get(host)
    if state is None:
        raise NotFound(f"no host {host} in the knowledge view")
    topology = state.topology
    return _page("host.html", host=state, status=host_status(state), usage=kpis.host_usage(state),
                 gpus=kpis.host_gpus(state), topology=topology,
                 layout=topology_layout(topology) if topology else None,
                 matrix=topology_matrix(topology) if topology else None)


def decisions_page():
    """``GET /ui/decisions``: recent decisions, filtered by the query's fields."""
    fields = {k: request.args.get(k, "").strip()
              for k in ("service", "pipeline", "outcome", "intent", "resource_id", "request_id")}
    try:
        limit = min(max(int(request.args.get("limit", 50)), 1), 500)
    except ValueError:
        raise BadRequest("limit must be an integer") from None
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
        raise NotFound(f"no decision {decision_id}")
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
    try:
        limit = min(max(int(request.args.get("limit", 100)), 1), 1000)
    except ValueError:
        raise BadRequest("limit must be an integer") from None
    moves, counts = history.recent_moves(current_app.extensions["cortex"].engine, limit)
    return _page("descheduler.html", moves=moves, counts=counts, limit=limit)


def pipelines_page():
    """``GET /ui/pipelines``: every pipeline's steps, options and multipliers; the rules."""
    return _page("pipelines.html", **pipeline_tables(current_app.extensions["cortex"].pipelines))


#: Seconds between two reloads of a live panel unless ``?refresh=`` says otherwise.
REFRESH_SECONDS = 10
_MAX_REFRESH = 3600
#: Services a decision can be of, as the decisions table spells them.
SERVICES = ("nova", "cinder", "manila", "kubernetes")


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    """The query argument ``name`` as an int from ``low`` to ``high``; BadRequest (400) if not."""
    raw = request.args.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer from {low} to {high}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high}, not {value}")
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


#: Windows offered in the timeline's form, in hours (any 1..MAX_HOURS may be asked for).
TIMELINE_HOURS = (1, 3, 6, 12, 24, 72, 168, 720)


def _timeline_args() -> dict[str, Any]:
    """The timeline's query: ``hours``, ``service``, ``pipeline``, ``refresh`` (400 if bad)."""
    hours = _int_arg("hours", 1, 1, history.MAX_HOURS)
    service = request.args.get("service", "").strip()
    if service and service not in SERVICES:
        raise BadRequest(f"service must be one of {', '.join(SERVICES)}")
    pipeline = request.args.get("pipeline", "").strip()
    if len(pipeline) > 255:
        raise BadRequest("pipeline must be at most 255 characters")
    return {"hours": hours, "service": service, "pipeline": pipeline, "refresh": _refresh()}


def _timeline_context() -> dict[str, Any]:
    """What the timeline page and its panel show: the counts as a chart and a table.

    Besides, whatever the window: the calls that found no host in the last day by
    service, pipeline and cause (:func:`cortex.services.history.refusals_by_cause`).
    """
    args = _timeline_args()
    now = datetime.now(UTC)
    counted = history.decision_timeline(current_app.extensions["cortex"].engine,
                                        args["hours"], now, service=args["service"] or None,
                                        pipeline=args["pipeline"] or None)
    refusals = history.refusals_by_cause(current_app.extensions["cortex"].engine, now,
                                         service=args["service"] or None,
                                         pipeline=args["pipeline"] or None)
    query = _query(hours=args["hours"], service=args["service"], pipeline=args["pipeline"],
                   refresh=args["refresh"] if args["refresh"] != REFRESH_SECONDS else None)
    return {"args": args, "chart": timeline_chart(counted), "totals": timeline_totals(counted),
            "refusals": refusals, "refusal_hours": history.REFUSAL_HOURS,
            "updated": now, "step": counted.step,
            "panel_url": url_for("/ui/timeline/panel", **query)}


def timeline_page():
    """``GET /ui/timeline``: decisions over time per service and pipeline, refusals marked.

    Below the chart, the last day's calls that found no host, by cause. Query:
    ``hours`` (1 to 720, default 1; the bucket width follows, 1 minute for the last
    hour), ``service``, ``pipeline`` (filters), ``refresh`` (seconds between reloads
    of the chart, 0 to 3600, default 10; 0: none). A bad value answers 400.
    """
    context = _timeline_context()
    hours = sorted(set(TIMELINE_HOURS) | {context["args"]["hours"]})
    pipelines = sorted(current_app.extensions["cortex"].pipelines.pipelines)
    return _page("timeline.html", services=SERVICES, pipelines=pipelines, hour_options=hours,
                 **context)


def timeline_panel():
    """``GET /ui/timeline/panel``: the timeline's chart and table alone (htmx polls it)."""
    return _panel("_timeline_panel.html", **_timeline_context())


#: Host rows per page of the heatmap: the default and the most one may ask for.
HEATMAP_ROWS, MAX_HEATMAP_ROWS = 100, 250


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


def _forecasts_context() -> dict[str, Any]:
    """What the foresight page and its panel show for ``model``, ``family``, ``az``, ``refresh``.

    A flavor family's forecast is set against its flavors' placeable supply
    (:func:`cortex.services.forecasts.with_placeable`).
    """
    services = current_app.extensions["cortex"]
    model, zone = request.args.get("model", "").strip(), request.args.get("az", "").strip()
    family = request.args.get("family", "").strip()
    refresh = _refresh()
    try:
        documents = forecasts.with_placeable(forecasts.stored(services.engine),
                                             flavor_supply(current_app.extensions))
    except DatabaseUnreachable as exc:
        raise ServiceUnavailable(f"database unreachable: {exc}") from None
    models = sorted({d["model"] for d in documents if not d.get("flavor_family")})
    families = sorted({d["flavor_family"] for d in documents if d.get("flavor_family")})
    zones = sorted({d["availability_zone"] for d in documents if d["availability_zone"]})
    shown = [d for d in documents if (not model or d["model"] == model)
             and (not family or d.get("flavor_family") == family)
             and (not zone or d["availability_zone"] == zone)]
    shown.sort(key=soonest)
    charts = [{"document": d, "chart": forecast_chart(d)} for d in shown[:MAX_CHARTS]]
    try:
        view = services.knowledge.view()
    except KnowledgeUnavailable:
        view = services.knowledge.current
    settings = EnergySettings.from_conf(services.conf)
    energy = zone_energy(view, settings.intensities, settings.default_intensity) if view else []
    args = {"model": model, "family": family, "az": zone, "refresh": refresh}
    return {"charts": charts, "hidden": max(0, len(shown) - MAX_CHARTS), "models": models,
            "families": families,
            "zones": zones, "energy": energy, "args": args,
            "computed_at": documents[0]["computed_at"] if documents else None,
            "updated": datetime.now(UTC),
            "panel_url": url_for("/ui/forecasts/panel", **_query(**args))}


def forecasts_page():
    """``GET /ui/forecasts?model=&family=&az=&refresh=``: forecasts and energy, live."""
    return _page("forecasts.html", active="forecasts", **_forecasts_context())


def forecasts_panel():
    """``GET /ui/forecasts/panel``: the page's live panel alone (what htmx swaps in)."""
    return _panel("_forecasts_panel.html", **_forecasts_context())
