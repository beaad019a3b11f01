"""The WSGI application: one constructor, the API's route table.

``create_app(conf)`` builds everything a worker needs (engine, knowledge cache,
pipelines, validator, decision writer, metrics, the services the handlers call) from
the configuration passed in, and routes the API's paths (:data:`ROUTES`) and the
dashboard's (:data:`cortex.dashboard.ROUTES`) behind one authorization; no
module-level state, no import side effects. WSGI, tests and tools all call it.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from flask import Flask, Response, current_app, g, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException

import cortex
from cortex import dashboard, log
from cortex.api import capacity, commitments, forecasts, kubernetes
from cortex.api.auth import POLICIES, Authorizer, keystone_middleware
from cortex.api.errors import ApiError, error_response, http_error
from cortex.api.freshness import (
    DATABASE_ERRORS,
    bound_database_waits,
    database_unavailable,
    end_database_waits,
)
from cortex.api.guard import BodyGuard
from cortex.api.metrics import (
    ApiMetrics,
    EnergySettings,
    KnowledgeCollector,
    ReservationFeedCollector,
    StepAnswersCollector,
)
from cortex.api.network import list_reservations, show_network_topology
from cortex.api.scheduler import external
from cortex.api.schema import RequestValidator, load_openapi
from cortex.api.simulate import simulate
from cortex.api.topology import post_topology, show_topology
from cortex.conf import Config, ConfigError, shipped_file
from cortex.db.engine import ConnectionLimits, Engine, make_engine
from cortex.ids import new_uuid
from cortex.knowledge.cache import KnowledgeCache
from cortex.knowledge.network import MetadataKeys
from cortex.kubernetes.client import KubernetesApi
from cortex.pipeline.config import PipelineSet, load_pipelines
from cortex.pipeline.explain import explain
from cortex.request import PARSERS, NovaRequest
from cortex.request.devices import CatalogError, DeviceCatalog
from cortex.scheduler.service import SchedulerService, SchedulerSettings
from cortex.services import forecasts as forecast_service
from cortex.services.health import healthcheck_detail, knowledge_health, sync_ages
from cortex.services.kubernetes import Extender
from cortex.store.decisions import DecisionStore, DecisionWriter
from cortex.store.reservations import ReservationStore
from cortex.store.shapes import ShapeLog, ShapeStore

LOG = logging.getLogger(__name__)


@dataclass
class Services:
    """What the handlers use, reachable as ``current_app.extensions["cortex"]``."""

    conf: Config
    engine: Engine
    knowledge: KnowledgeCache
    pipelines: PipelineSet
    validator: RequestValidator
    decisions: DecisionWriter
    decision_store: DecisionStore
    metrics: ApiMetrics
    authorizer: Authorizer
    reservations: ReservationStore
    scheduler: SchedulerService
    parsers: dict[str, Callable[[Any], Any]] = field(default_factory=lambda: dict(PARSERS))
    devices: DeviceCatalog | None = None
    kubernetes: Extender | None = None
    shapes: ShapeLog = field(default_factory=lambda: ShapeLog(None))


def version_document():
    """``GET /``: the API versions (OpenStack version discovery shape).

    The links start with ``[api] public_url`` when set, else they are absolute paths
    (``/v1``); never with the request's Host header, which any client can forge.
    """
    base = current_app.extensions["cortex"].conf.get("api", "public_url").rstrip("/")
    return jsonify(versions=[{
        "id": "v1", "status": "CURRENT", "min_version": "1.0", "max_version": "1.0",
        "links": [{"rel": "self", "href": f"{base}/v1"}]}],
        name="cortex", version=cortex.__version__)


def healthcheck():
    """``GET /healthcheck``: 200 ``OK``, ``HEAD`` 204; 503 with the reason.

    503 exactly when the external endpoints answer 503 for want of knowledge (none
    loaded, or older than ``[database] max_knowledge_age``: see
    :func:`cortex.services.health.knowledge_health`); 200 while they answer. Never waits
    for the database longer than ``[database] check_timeout``. While the database is
    unreachable and the knowledge still young enough, ``X-Cortex-Degraded`` says so.
    ``?detail=1`` (per-source sync ages) needs the reader role: 401/403 otherwise.
    """
    services = current_app.extensions["cortex"]
    if request.args.get("detail"):
        services.authorizer.authorize("reader")
    status, text, degraded = knowledge_health(services.knowledge,
                                              services.conf.get("database", "check_timeout"))
    if request.method == "HEAD" and status == 200:
        response = Response(status=204)
    elif request.args.get("detail") and status == 200:
        response = jsonify(healthcheck_detail(services.engine, services.knowledge))
    else:
        response = Response(text, status, mimetype="text/plain")
    if degraded:
        response.headers["X-Cortex-Degraded"] = degraded
    return response


def openapi_document():
    """``GET /openapi.json``: the hand-written OpenAPI 3.1 document."""
    return jsonify(load_openapi())


def metrics():
    """``GET /metrics``: Prometheus text exposition (every gunicorn worker's, see metrics.py)."""
    exposition = current_app.extensions["cortex"].metrics.exposition()
    # content_type, not mimetype: CONTENT_TYPE_LATEST carries its charset already, and
    # werkzeug appends another one to a text/* mimetype.
    return Response(exposition, content_type=CONTENT_TYPE_LATEST)


def list_decisions():
    """``GET /v1/decisions?resource_id=&request_id=&limit=``: newest first.

    ``limit`` is 1 to 1000 (default 20); another value is a 400, never clamped.
    """
    try:
        limit = int(request.args.get("limit", 20))
    except ValueError:
        raise ApiError(400, "limit must be an integer") from None
    if not 1 <= limit <= 1000:
        raise ApiError(400, f"limit must be between 1 and 1000, not {limit}")
    store = current_app.extensions["cortex"].decision_store
    found = store.find(resource_id=request.args.get("resource_id"),
                       request_id=request.args.get("request_id"), limit=limit)
    return jsonify(decisions=[d.as_document() for d in found])


def show_decision(decision_id: str):
    """``GET /v1/decisions/<id>``: one decision with its per-step results."""
    decision = current_app.extensions["cortex"].decision_store.get(decision_id)
    if decision is None:
        raise ApiError(404, f"no decision {decision_id}")
    return jsonify(decision.as_document())


def show_explanation(decision_id: str):
    """``GET /v1/decisions/<id>/explanation``: why the answer was what it was."""
    decision = current_app.extensions["cortex"].decision_store.get(decision_id)
    if decision is None:
        raise ApiError(404, f"no decision {decision_id}")
    return jsonify(explain(decision))


#: path -> {method: (handler, policy)}; policies in cortex.api.auth.POLICIES. The
#: dashboard's are :data:`cortex.dashboard.ROUTES`.
ROUTES: dict[str, dict[str, tuple[Any, str]]] = {
    "/": {"GET": (version_document, "public")},
    "/healthcheck": {"GET": (healthcheck, "public"), "HEAD": (healthcheck, "public")},
    "/openapi.json": {"GET": (openapi_document, "public")},
    "/metrics": {"GET": (metrics, "metrics")},
    "/scheduler/nova/external": {"POST": (partial(external, "nova"), "external")},
    "/scheduler/cinder/external": {"POST": (partial(external, "cinder"), "external")},
    "/scheduler/manila/external": {"POST": (partial(external, "manila"), "external")},
    "/scheduler/kubernetes/filter": {"POST": (kubernetes.filter_nodes, "external")},
    "/scheduler/kubernetes/prioritize": {"POST": (kubernetes.prioritize_nodes, "external")},
    "/scheduler/kubernetes/bind": {"POST": (kubernetes.bind_pod, "external")},
    "/v1/decisions": {"GET": (list_decisions, "reader")},
    "/v1/decisions/<decision_id>": {"GET": (show_decision, "reader")},
    "/v1/topology/<host>": {"POST": (post_topology, "agent"), "GET": (show_topology, "reader")},
    "/v1/decisions/<decision_id>/explanation": {"GET": (show_explanation, "reader")},
    "/v1/network-topology": {"GET": (show_network_topology, "reader")},
    "/v1/reservations": {"GET": (list_reservations, "reader")},
    "/v1/forecasts": {"GET": (forecasts.list_forecasts, "reader")},
    "/v1/commitments": {"GET": (commitments.list_all, "admin"),
                        "POST": (commitments.create_commitment, "admin")},
    "/v1/commitments/<commitment_id>": {"GET": (commitments.show_commitment, "admin"),
                                        "DELETE": (commitments.remove_commitment, "admin")},
    "/v1/scheduler/nova/simulate": {"POST": (partial(simulate, "nova"), "reader")},
    "/v1/scheduler/cinder/simulate": {"POST": (partial(simulate, "cinder"), "reader")},
    "/v1/scheduler/manila/simulate": {"POST": (partial(simulate, "manila"), "reader")},
}


def _dispatch(handlers: dict[str, tuple[Any, str]], **kwargs):
    """Authorize, then call the handler of the request's method (Flask answers 405)."""
    method = "GET" if request.method == "HEAD" and "HEAD" not in handlers else request.method
    handler, policy = handlers[method]
    current_app.extensions["cortex"].authorizer.authorize(policy)
    return handler(**kwargs)


def create_app(conf: Config, engine: Engine | None = None,
               pipelines: PipelineSet | None = None) -> Flask:
    """Build the Flask app for ``conf``: its services, the API's and the dashboard's routes.

    ``engine`` and ``pipelines`` may be passed in (tests, tools); otherwise they come
    from ``[database] connection`` and ``[scheduler] pipelines_file``. Raises
    PipelineConfigError or ConfigError at startup for bad configuration (including
    bad static tokens or a missing keystone extra).
    """
    app = Flask("cortex", template_folder="dashboard/templates", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = conf.get("api", "max_body_bytes")
    app.json.sort_keys = False
    app.add_template_filter(dashboard.quantity)
    limits = ConnectionLimits.from_conf(conf)
    engine = engine or make_engine(conf.database_url,
                                   connect_timeout=conf.get("database", "connect_timeout"),
                                   limits=limits)
    pipelines = pipelines or load_pipelines(
        conf.get("scheduler", "pipelines_file") or shipped_file("pipelines.yaml"))
    services = app.extensions["cortex"] = _services(conf, engine, pipelines, limits)
    capacity.register(app)  # GET /v1/capacity and cortex_flavor_placeable_instances
    _add_routes(app, ROUTES | dashboard.ROUTES)
    app.before_request(_start_request)
    app.before_request(bound_database_waits)
    app.teardown_request(end_database_waits)
    app.teardown_request(lambda _exc: log.bind_request(None))
    app.after_request(_finish_request)
    app.register_error_handler(ApiError, lambda e: error_response(e.status, e.detail, e.code))
    app.register_error_handler(HTTPException, http_error)
    for error in DATABASE_ERRORS:
        app.register_error_handler(error, database_unavailable)
    app.register_error_handler(Exception, _unexpected)
    if services.authorizer.strategy == "keystone":
        app.wsgi_app = keystone_middleware(app.wsgi_app, conf)
    app.wsgi_app = BodyGuard(app.wsgi_app, conf.get("api", "max_body_bytes"))  # 408, 413
    services.knowledge.refresh()  # warm; a failure is retried per request
    services.knowledge.start()  # the age counts from the database, requests or none
    _warn_at_start(conf, services.knowledge)
    return app


def _add_routes(app: Flask, routes: dict[str, dict[str, tuple[Any, str]]]) -> None:
    """Route each path to :func:`_dispatch` of its handlers; ValueError for an unknown policy."""
    for path, handlers in routes.items():
        if any(policy not in POLICIES for _, policy in handlers.values()):
            raise ValueError(f"route {path}: unknown policy")
        app.add_url_rule(path, endpoint=path, view_func=partial(_dispatch, handlers),
                         methods=list(handlers), provide_automatic_options=False)


def _services(conf: Config, engine: Engine, pipelines: PipelineSet,
              limits: ConnectionLimits) -> Services:
    """What the handlers use: the knowledge, the stores, the scheduler, their metrics.

    The decision writer is closed at exit; the metrics collectors read the knowledge,
    the reservation feed, the kept step answers and the stored forecasts at scrape time.
    """
    authorizer = Authorizer(conf)  # bad tokens refused before a thread starts
    app_metrics = ApiMetrics()
    writer = _decision_writer(conf, engine, app_metrics)
    devices = device_catalog(conf)
    knowledge = KnowledgeCache(engine, conf.get("database", "knowledge_check_interval"),
                               conf.get("database", "max_knowledge_age"),
                               network_keys=MetadataKeys.from_conf(conf),
                               background=conf.get("database", "knowledge_background_reload"),
                               check_timeout=conf.get("database", "check_timeout"),
                               max_retry=conf.get("database", "max_retry_interval"),
                               kubernetes_nodes=conf.get("kubernetes", "nodes_from_reports"),
                               request_sizes=learns_sizes(pipelines),
                               on_skipped=lambda table, rows:
                               app_metrics.knowledge_rows_skipped.labels(table).inc(rows))
    app_metrics.add_scrape_collector(KnowledgeCollector(
        knowledge, partial(sync_ages, engine), EnergySettings.from_conf(conf),
        host_utilization=conf.get("api", "export_host_utilization")))
    reservations = ReservationStore(engine, conf.get("database", "connect_timeout"),
                                    feed=conf.get("scheduler", "reservation_feed"),
                                    limits=limits)
    app_metrics.add_scrape_collector(ReservationFeedCollector(reservations))
    app_metrics.add_scrape_collector(StepAnswersCollector(
        knowledge, conf.get("scheduler", "step_memo_size")))
    app_metrics.add_scrape_collector(forecasts.ForecastCollector(
        partial(forecast_service.stored, engine)))
    scheduler = SchedulerService(pipelines, knowledge, SchedulerSettings.from_conf(conf),
                                 reservations, writer, app_metrics.scheduler)
    return Services(
        conf=conf, engine=engine, knowledge=knowledge,
        pipelines=pipelines, validator=RequestValidator(load_openapi()), decisions=writer,
        decision_store=DecisionStore(engine), metrics=app_metrics,
        authorizer=authorizer, reservations=reservations, scheduler=scheduler,
        parsers=dict(PARSERS, nova=partial(NovaRequest.from_body, devices=devices)),
        devices=devices,
        kubernetes=Extender(scheduler, engine, KubernetesApi.from_conf(conf), devices,
                            conf.get("kubernetes", "nodes_from_reports")),
        shapes=ShapeLog(ShapeStore(engine) if conf.get("api", "warm_up_shapes") else None,
                        scheduler.pipelines))


def _decision_writer(conf: Config, engine: Engine, app_metrics: ApiMetrics) -> DecisionWriter:
    """The worker's decision writer (``[scheduler] decision_*``), counted in ``app_metrics``."""
    writer = DecisionWriter(engine, conf.get("scheduler", "decision_queue_size"),
                            on_drop=app_metrics.decisions_dropped.inc,
                            retention_days=conf.get("scheduler", "decision_retention_days"),
                            on_handled=app_metrics.decision_queue_depth.dec,
                            on_unstorable=app_metrics.decisions_unstorable.inc,
                            on_queued=app_metrics.decision_queue_depth.inc,
                            demand_retention_days=conf.get("forecast", "demand_retention_days"),
                            flush_interval=conf.get("scheduler", "decision_flush_interval"),
                            quiet_wait=conf.get("scheduler", "decision_quiet_wait"))
    atexit.register(writer.close)
    return writer


def _warn_at_start(conf: Config, knowledge: KnowledgeCache) -> None:
    """Log a WARNING for each setup that answers nothing useful yet; never raises.

    An empty knowledge view (no compute hosts, no storage pools), and authentication that no
    caller can pass: ``static`` without ``[api] static_tokens``, ``keystone`` with an
    empty ``[keystone_authtoken]``. Uses the view ``refresh`` just loaded: no query of
    its own; when the database could not be read, refresh has said so already.
    """
    try:
        view = knowledge.current
        if view is not None and not view.hosts and not any(view.pools.values()):
            LOG.warning("the knowledge holds no hosts (nothing synced or loaded yet): run "
                        "'cortex-manage sync --once' to sync from OpenStack, or "
                        "'cortex-manage load-fleet FILE' to load a fleet file")
        strategy = conf.get("api", "auth_strategy")
        if strategy == "static" and not conf.get("api", "static_tokens").strip():
            LOG.warning("auth_strategy=static and [api] static_tokens is empty: every "
                        "protected endpoint (decisions, topology, the dashboard) refuses "
                        "every caller with 401")
        if strategy == "keystone" and not conf.section("keystone_authtoken"):
            LOG.warning("auth_strategy=keystone and the [keystone_authtoken] section is "
                        "empty or missing: keystonemiddleware cannot validate tokens, so "
                        "every protected endpoint refuses every caller")
    except Exception:  # a warning must never stop the API from starting
        LOG.exception("startup checks failed; carrying on")


def learns_sizes(pipelines: PipelineSet) -> bool:
    """Whether a pipeline weighs with the recorded GPU demand.

    A fragmentation weigher measuring the recorded sizes (``sizes_from: demand``) or
    ``weigher_gpu_model_reserve`` (the recorded demand per model): then the knowledge
    view counts them; else it skips the read.
    """
    return any(getattr(step.plugin.options, "sizes_from", None) == "demand"
               or step.plugin.name == "weigher_gpu_model_reserve"
               for pipeline in pipelines.pipelines.values() for step in pipeline.weighers)


def device_catalog(conf: Config) -> DeviceCatalog:
    """The ``[gpu]`` PCI aliases and device profiles; ConfigError when they do not parse."""
    try:
        return DeviceCatalog.from_json(conf.get("gpu", "pci_alias"),
                                       conf.get("gpu", "device_profiles"))
    except CatalogError as exc:
        raise ConfigError(f"[gpu] {exc}") from None


def _start_request() -> None:
    """Give every request our own ``req-<uuid>`` id; refuse NUL characters in the URL.

    PostgreSQL cannot store NUL in text, so a NUL in a path or query value would
    otherwise surface as a database error instead of a 400.
    """
    g.request_id = f"req-{new_uuid()}"
    log.bind_request(g.request_id)
    if "\x00" in request.path or any("\x00" in v for v in request.args.values()):
        raise ApiError(400, "NUL characters are not allowed in the URL")


def _finish_request(response: Response) -> Response:
    """Send the request id (and the decision id, when one was recorded) back."""
    response.headers["x-openstack-request-id"] = g.get("request_id", "")
    if g.get("decision_id"):
        response.headers["x-cortex-decision-id"] = g.decision_id
    return response


def _unexpected(exc: Exception) -> Response:
    """A bug: log it with the request id, answer 503 so the caller keeps its order."""
    LOG.exception("unexpected error")
    return error_response(503, f"internal error ({type(exc).__name__}); see the service log")
