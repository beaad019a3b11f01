"""The external scheduler endpoints: parse the body, call the scheduler, answer the hosts.

Everything between the typed request and the typed decision is the scheduler service's
(:mod:`cortex.scheduler.service`); this module only turns a body into a request and a
decision into ``{"hosts": [...]}`` or the contract's error answer.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Response, current_app, g, jsonify

from cortex import log
from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.request import BadRequest, SchedulingRequest
from cortex.scheduler.service import LIVE, RunOptions, SchedulingFailed

try:  # the ``fast`` extra
    import orjson
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    orjson = None


def parse(services: Any, service: str, body: Any) -> SchedulingRequest:
    """The typed request of a body; ApiError 400 for a body the schema or parser refuses."""
    errors = services.validator.errors(service, body, g.get("finite_numbers", False),
                                       g.get("plain_names", False))
    if errors:
        raise ApiError(400, "; ".join(errors))
    try:
        return services.parsers[service](body)
    except BadRequest as exc:
        raise ApiError(400, str(exc)) from None


def run(services: Any, request: SchedulingRequest, options: RunOptions, started: float):
    """Run ``request`` through the scheduler: its Decision.

    Raises ApiError with the scheduler's 400/503 (the call is recorded when its options
    say so). Sets the ids the log lines and the ``x-cortex-decision-id`` header show.
    """
    log.bind_caller(request.request_id, request.global_request_id)
    try:
        decision = services.scheduler.schedule(request, options, started,
                                               g.get("request_id"))
    except SchedulingFailed as exc:
        g.decision_id = exc.decision.id
        raise ApiError(exc.status, exc.detail, code=exc.code) from None
    g.decision_id = decision.id
    return decision


def answer(hosts: list[str]) -> Response:
    """The answer ``{"hosts": [...]}``, as Flask's ``jsonify`` writes it.

    orjson writes it where installed (the ``fast`` extra): ~0.05 ms for 5,000 hosts where
    the standard library takes ~0.6. A host name orjson refuses (a lone surrogate) is left
    to ``jsonify``, which escapes it.
    """
    if orjson is not None:
        try:
            return Response(orjson.dumps({"hosts": hosts}) + b"\n", mimetype="application/json")
        except orjson.JSONEncodeError:
            pass
    return jsonify(hosts=hosts)


def external(service: str):
    """``POST /scheduler/<service>/external``: ``{"hosts": [...]}`` best first.

    A body refused before it is a request (415, 400) is counted and logged as a call,
    not recorded. A shape the worker meets first is kept for fresh workers' warm-up
    (:mod:`cortex.store.shapes`). The worker's decision writer holds its records back
    while the call runs (:meth:`cortex.store.decisions.DecisionWriter.call`).
    """
    services = current_app.extensions["cortex"]
    started = time.perf_counter()
    with services.decisions.call():  # the decision writer waits for the call to end
        try:
            body = read_json_body()
            request = parse(services, service, body)
        except ApiError as exc:
            services.scheduler.refused(service, exc.status, exc.detail, started)
            raise
        decision = run(services, request, LIVE, started)
        services.shapes.meet(request, decision.pipeline, body)
        return answer(list(decision.result))
