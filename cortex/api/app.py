"""The WSGI application: one constructor, one route table.

``create_app(conf)`` builds everything a worker needs (engine, knowledge cache,
pipelines, validator, decision writer, metrics) from the configuration passed in;
no module-level state, no import side effects. WSGI, tests and tools all call it.
"""

from __future__ import annotations

import atexit
import logging
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

from flask import Flask, Response, current_app, g, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException

import cortex
from cortex.api.errors import ApiError, error_response, http_error
from cortex.api.freshness import KnowledgeAgeCollector, healthcheck_detail
from cortex.api.metrics import ApiMetrics
from cortex.api.scheduler import external
from cortex.api.schema import RequestValidator, load_openapi
from cortex.conf import Config, shipped_file
from cortex.db.engine import make_engine
from cortex.knowledge.cache import KnowledgeCache
from cortex.knowledge.decisions import DecisionStore, DecisionWriter
from cortex.pipeline.config import PipelineSet, load_pipelines

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


def version_document():
    """``GET /``: the API versions (OpenStack version discovery shape)."""
    return jsonify(versions=[{
        "id": "v1", "status": "CURRENT", "min_version": "1.0", "max_version": "1.0",
        "links": [{"rel": "self", "href": request.host_url.rstrip("/") + "/v1"}]}],
        name="cortex", version=cortex.__version__)


def healthcheck():
    """``GET /healthcheck``: 200 ``OK``, ``HEAD`` 204; 503 with the reason.

    503 when the database does not answer a ``SELECT 1``.
    """
    services = current_app.extensions["cortex"]
    try:
        with services.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return Response(f"database unreachable: {type(exc).__name__}", 503,
                        mimetype="text/plain")
    if request.method == "HEAD":
        return Response(status=204)
    if request.args.get("detail"):
        return healthcheck_detail(services.engine, services.knowledge)
    return Response("OK", 200, mimetype="text/plain")


def openapi_document():
    """``GET /openapi.json``: the hand-written OpenAPI 3.1 document."""
    return jsonify(load_openapi())


def metrics():
    """``GET /metrics``: Prometheus text exposition of this worker's registry."""
    services = current_app.extensions["cortex"]
    services.metrics.decision_queue_depth.set(services.decisions.depth)
    return Response(generate_latest(services.metrics.registry), mimetype=CONTENT_TYPE_LATEST)


def list_decisions():
    """``GET /v1/decisions?resource_id=&request_id=&limit=``: newest first."""
    try:
        limit = min(max(int(request.args.get("limit", 20)), 1), 1000)
    except ValueError:
        raise ApiError(400, "limit must be an integer") from None
    store = current_app.extensions["cortex"].decision_store
    return jsonify(decisions=store.find(resource_id=request.args.get("resource_id"),
                                        request_id=request.args.get("request_id"), limit=limit))


def show_decision(decision_id: str):
    """``GET /v1/decisions/<id>``: one decision with its per-step results."""
    decision = current_app.extensions["cortex"].decision_store.get(decision_id)
    if decision is None:
        raise ApiError(404, f"no decision {decision_id}")
    return jsonify(decision)


ROUTES: dict[str, dict[str, Any]] = {
    "/": {"GET": version_document},
    "/healthcheck": {"GET": healthcheck, "HEAD": healthcheck},
    "/openapi.json": {"GET": openapi_document},
    "/metrics": {"GET": metrics},
    "/scheduler/nova/external": {"POST": partial(external, "nova")},
    "/scheduler/cinder/external": {"POST": partial(external, "cinder")},
    "/scheduler/manila/external": {"POST": partial(external, "manila")},
    "/v1/decisions": {"GET": list_decisions},
    "/v1/decisions/<decision_id>": {"GET": show_decision},
}


def _dispatch(handlers: dict[str, Any], **kwargs):
    """Call the handler of the request's method (Flask already answered 405 for others)."""
    method = "GET" if request.method == "HEAD" and "HEAD" not in handlers else request.method
    return handlers[method](**kwargs)


def create_app(conf: Config, engine: Engine | None = None,
               pipelines: PipelineSet | None = None) -> Flask:
    """Build the Flask app for ``conf``.

    ``engine`` and ``pipelines`` may be passed in (tests, tools); otherwise they come
    from ``[database] connection`` and ``[scheduler] pipelines_file``. Raises
    PipelineConfigError or ConfigError at startup for bad configuration.
    """
    app = Flask("cortex")
    app.config["MAX_CONTENT_LENGTH"] = conf.get("api", "max_body_bytes")
    app.json.sort_keys = False
    engine = engine or make_engine(conf.database_url)
    pipelines = pipelines or load_pipelines(
        conf.get("scheduler", "pipelines_file") or shipped_file("pipelines.yaml"))
    app_metrics = ApiMetrics()
    app_metrics.registry.register(KnowledgeAgeCollector(engine))
    writer = DecisionWriter(engine, conf.get("scheduler", "decision_queue_size"),
                            on_drop=app_metrics.decisions_dropped.inc,
                            retention_days=conf.get("scheduler", "decision_retention_days"))
    atexit.register(writer.close)
    app.extensions["cortex"] = Services(
        conf=conf, engine=engine,
        knowledge=KnowledgeCache(engine, conf.get("database", "knowledge_check_interval")),
        pipelines=pipelines, validator=RequestValidator(load_openapi()), decisions=writer,
        decision_store=DecisionStore(engine), metrics=app_metrics)
    for path, handlers in ROUTES.items():
        app.add_url_rule(path, endpoint=path, view_func=partial(_dispatch, handlers),
                         methods=list(handlers), provide_automatic_options=False)
    app.before_request(_start_request)
    app.after_request(_finish_request)
    app.register_error_handler(ApiError, lambda e: error_response(e.status, e.detail, e.code))
    app.register_error_handler(HTTPException, http_error)
    app.register_error_handler(Exception, _unexpected)
    return app


def _start_request() -> None:
    """Give every request our own ``req-<uuid>`` id."""
    g.request_id = f"req-{uuid.uuid4()}"


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
