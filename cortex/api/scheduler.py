"""The external scheduler endpoints: parse, validate, choose, run, answer, record."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from flask import current_app, g, jsonify, request

from cortex.api.errors import ApiError
from cortex.db import guard
from cortex.ids import new_uuid
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.reservations import with_reservations
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.choice import PipelineNotChosen, choose_pipeline
from cortex.pipeline.config import Pipeline
from cortex.pipeline.engine import PipelineResult, StepFailed, run_pipeline
from cortex.pipeline.explain import first_choice
from cortex.pipeline.reservations import STEP as PROMISE_STEP
from cortex.pipeline.reservations import promise_first
from cortex.request import BadRequest
from cortex.rules.demand import gpu_count
from cortex.rules.gpu_sets import can_place_connected
from cortex.store.decisions import COMPACT_FORMAT

LOG = logging.getLogger(__name__)
#: Seconds the database waits of one call may take when request_time_budget is 0.
NO_BUDGET_WAIT = 5.0
#: Share of the budget the optional read of the in-flight reservations may take.
READ_SHARE = 0.25


def _reject_constant(name: str) -> float:
    """json.loads hook: NaN and Infinity are not JSON."""
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads hook: an object with a repeated key is ambiguous, so it is refused."""
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {repeated!r}")
    return result


def read_json_body() -> Any:
    """The request's JSON document; ApiError 415/400 as the contract says.

    The body's size (413) and arrival time (408) were settled before the app saw the
    request, by :class:`cortex.api.guard.BodyGuard`, chunked bodies included.
    """
    if request.mimetype != "application/json" and not request.mimetype.endswith("+json"):
        raise ApiError(415, f"Content-Type must be application/json, not {request.mimetype!r}")
    data = request.get_data(cache=False)
    try:
        return json.loads(data, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"body is not JSON: {str(exc)[:200]}") from None


def external(service: str):
    """``POST /scheduler/<service>/external``: ``{"hosts": [...]}`` best first."""
    cortex = current_app.extensions["cortex"]
    started = time.perf_counter()
    record: dict[str, Any] = {"service": service}
    try:
        body = read_json_body()
        parsed, view, result = schedule(cortex, service, body, record, started)
        observe(cortex.metrics, record, parsed, view, result)
        _finish(cortex, record, "ok", 200, started)
        return jsonify(hosts=result.hosts)
    except ApiError as exc:
        _finish(cortex, record, "rejected" if exc.status < 500 else "error", exc.status,
                started, exc.detail)
        raise


def schedule(cortex: Any, service: str, body: Any, record: dict[str, Any], started: float,
             choose: Callable[[Any], Pipeline] | None = None, promise: bool = True,
             stored_form: bool = True) -> tuple[Any, KnowledgeView, PipelineResult]:
    """Validate, parse, choose the pipeline and run it; fill ``record`` on the way.

    ``choose(request)`` picks the pipeline (default: the configured rules) and may
    raise ApiError. The pipeline sees the in-flight reservations; with ``promise`` the
    answer's first host is re-checked and reserved (:mod:`cortex.pipeline.reservations`).
    With ``stored_form`` the steps go into ``record`` as decision records keep them
    (:func:`cortex.store.decisions.compact_record`), else whole (``raw`` and
    ``scaled`` per host, ``final_weights``). Returns ``(request, view, result)``; raises
    ApiError 400/503 as the contract says.
    """
    errors = cortex.validator.errors(service, body)
    if errors:
        raise ApiError(400, "; ".join(errors))
    try:
        parsed = cortex.parsers[service](body)
    except BadRequest as exc:
        raise ApiError(400, str(exc)) from None
    record.update(_request_fields(parsed, body))
    g.caller_ids = (parsed.request_id, parsed.global_request_id)
    if getattr(parsed, "disbelieved_intent", None):
        disbelieved_intent(cortex.metrics, parsed)
    if choose is not None:
        pipeline = choose(parsed)
    else:
        try:
            pipeline = choose_pipeline(cortex.pipelines, parsed)
        except PipelineNotChosen as exc:
            raise ApiError(400, str(exc), code="cortex.pipeline_not_chosen") from None
    record["pipeline"] = pipeline.name
    budget = cortex.conf.get("scheduler", "request_time_budget")
    # every database wait below (a foreground knowledge check, the reservation read,
    # the promise) ends when the call's budget does (cortex.db.guard)
    with guard.deadline((budget or NO_BUDGET_WAIT) - (time.perf_counter() - started)):
        try:
            view = cortex.knowledge.view()
        except KnowledgeUnavailable as exc:
            raise ApiError(503, f"knowledge unavailable: {exc}") from None
        now = datetime.now(UTC)
        overlaid = _with_reservations(cortex, parsed, view, now)
        try:
            result = run_pipeline(pipeline, parsed, overlaid,
                                  cortex.conf.get("scheduler", "unknown_host_policy"),
                                  deadline=started + budget if budget else None)
        except StepFailed as exc:
            raise ApiError(503, str(exc), code="cortex.step_failed") from None
        if promise:
            result = promise_first(pipeline, parsed, view, overlaid, result,
                                   cortex.reservations,
                                   cortex.conf.get("scheduler", "reservation_ttl"), now)
            unpromised(cortex, parsed, result)
    record.update(_result_fields(result, view.version, stored_form))
    return parsed, view, result


def unpromised(cortex: Any, parsed: Any, result: PipelineResult) -> None:
    """Apply ``[scheduler] promise_failure_policy`` when the promise step failed.

    The step fails when the reservation store raised (the database failed, did not
    answer within the call's budget, or is marked down: :mod:`cortex.db.guard`).
    ``answer``: the ranking goes out unpromised, logged by
    :func:`~cortex.pipeline.reservations.promise_first` and counted here in
    ``cortex_scheduler_unpromised_answers_total``; ``fail``: ApiError 503, so Nova
    keeps its own order (the caller contract's reaction to an internal failure).
    """
    step = result.steps[-1] if result.steps else None
    if step is None or step.name != PROMISE_STEP or step.status != "error":
        return
    if cortex.conf.get("scheduler", "promise_failure_policy") == "fail":
        raise ApiError(503, f"in-flight reservation not made: {step.reason}",
                       code="cortex.promise_failed")
    cortex.metrics.unpromised_answers.labels(parsed.service).inc()


def disbelieved_intent(metrics: Any, parsed: Any) -> None:
    """Log and count a Nova call whose claimed intent its flags and spec do not back.

    The call runs as a create (:func:`cortex.request.nova.intent_claims`). Counted in
    ``cortex_scheduler_disbelieved_intents_total{claimed}``.
    """
    LOG.warning("nova external: intent %r claimed by _nova_check_type or the flags is not "
                "backed by the body (flags rebuild/resize/live, force_hosts); treated as a "
                "create (request_id=%s)", parsed.disbelieved_intent, parsed.request_id)
    metrics.disbelieved_intents.labels(parsed.disbelieved_intent).inc()


def _with_reservations(cortex: Any, request: Any, view: KnowledgeView,
                       now: datetime) -> KnowledgeView:
    """``view`` with the in-flight reservations counted (Nova only; ``view`` when off or failing).

    A database failure here is logged and the call goes on without them, as the
    knowledge view itself keeps serving through an outage. Reading the table (when
    the feed does not listen) may take :data:`READ_SHARE` of the call's budget at
    most, so that a database that hangs leaves the pipeline and the promise their time.
    """
    if request.service != "nova" or not cortex.conf.get("scheduler", "reservation_ttl"):
        return view
    budget = cortex.conf.get("scheduler", "request_time_budget") or NO_BUDGET_WAIT
    try:
        with guard.deadline(budget * READ_SHARE):
            active = cortex.reservations.active(now)
    except Exception as exc:  # noqa: BLE001 - database trouble must not fail the answer
        LOG.warning("in-flight reservations unreadable, not counted: %r", exc)
        return view
    return with_reservations(view, active, now, request.instance_uuid)


def observe(metrics: Any, record: dict[str, Any], parsed: Any, view: KnowledgeView,
            result: PipelineResult) -> None:
    """Count what the pipeline did: step times, removals, reordering, NVLink placements."""
    pipeline = result.pipeline
    for step in result.steps:
        if step.status == "ran":
            duration, removed = metrics.step(pipeline, step.name)
            duration.observe(step.duration_ms / 1000)
            if step.kind == "filter" and not step.shadow:
                removed.inc(len(step.removed))
    choice = first_choice(record)
    if choice:
        metrics.reordered.labels(pipeline, choice).inc()
    connected = gpu_placement(parsed, view, result.hosts)
    if connected is not None:
        metrics.gpu_placements.labels(
            pipeline, "connected" if connected else "not_connected").inc()


def gpu_placement(request: Any, view: KnowledgeView, hosts: list[str]) -> bool | None:
    """Whether the first host of a multi-GPU Nova request has NVLink-joined free GPUs.

    None when the request asks fewer than 2 GPUs, nothing was answered, or the first
    host reports no topology. Nova's PCI tracker picks the devices itself, so this
    says whether a fully NVLink-connected set was free, not which set Nova took.
    """
    if request.service != "nova" or not hosts or gpu_count(request) < 2:
        return None
    state = view.hosts.get(hosts[0])
    if state is None or state.topology is None:
        return None
    return can_place_connected(state.topology, gpu_count(request))


def _request_fields(parsed: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The decision record's inputs."""
    return {"request_id": parsed.request_id, "global_request_id": parsed.global_request_id,
            "resource_id": parsed.resource_id, "intent": parsed.intent,
            "hosts": [c.host for c in parsed.candidates],
            "weights": {c.host: c.weight for c in parsed.candidates}}


def _result_fields(result: PipelineResult, version: int, stored_form: bool) -> dict[str, Any]:
    """The decision record's per-step results and output, whole or in the stored form.

    The stored form is what the writer would make of the whole one (``weighed`` once,
    weigher values as lists, no scaled values, no final weights; see
    :func:`cortex.store.decisions.compact_record`), built here from the engine's
    lists instead of from per-host maps that would only be taken apart again.
    """
    fields = {"result": result.hosts, "unknown_hosts": result.unknown_hosts,
              "knowledge_version": version}
    if stored_form:
        return fields | {"format": COMPACT_FORMAT, "weighed": result.weighed,
                         "steps": [s.as_stored() for s in result.steps]}
    return fields | {"steps": [s.as_dict() for s in result.steps],
                     "final_weights": result.weights}


def _finish(cortex: Any, record: dict[str, Any], outcome: str, status: int,
            started: float, detail: str | None = None) -> None:
    """Log the call, count it, and hand its decision record to the writer."""
    duration = time.perf_counter() - started
    pipeline = record.get("pipeline") or "none"
    service = record["service"]
    cortex.metrics.request_duration.labels(service, pipeline, str(status)).observe(duration)
    cortex.metrics.requests.labels(service, pipeline, record.get("intent") or "unknown",
                                   outcome).inc()
    LOG.info("%s external: status=%d pipeline=%s hosts=%d->%d duration_ms=%.1f%s", service,
             status, pipeline, len(record.get("hosts", ())), len(record.get("result", ())),
             duration * 1000, f" detail={detail}" if detail else "")
    if "hosts" not in record:
        return  # not even a parsable request: nothing worth recording
    record.update(status=status, detail=detail, api_request_id=g.get("request_id"))
    g.decision_id = submit_decision(cortex, record, outcome, duration)


def submit_decision(cortex: Any, record: dict[str, Any], outcome: str, duration: float) -> str:
    """Hand ``record`` to the decision writer (never blocks); its new decision id."""
    decision_id = new_uuid()
    cortex.metrics.decision_queue_depth.inc()  # before: the writer may take it at once
    submitted = cortex.decisions.submit({
        "id": decision_id, "created_at": datetime.now(UTC), "service": record["service"],
        "pipeline": record.get("pipeline"), "request_id": record.get("request_id"),
        "global_request_id": record.get("global_request_id"),
        "resource_id": record.get("resource_id"), "intent": record.get("intent"),
        "outcome": outcome, "duration_ms": duration * 1000, "record": record})
    if not submitted:
        cortex.metrics.decision_queue_depth.dec()
    return decision_id
