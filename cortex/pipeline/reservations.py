"""Promise the answer's first host: re-check it under its lock and record the reservation.

The pipeline ran on a view with the in-flight reservations of a moment ago laid over
it; a concurrent call (another thread, worker or replica) may have promised the same
capacity since. :func:`promise_first` therefore takes the answer's hosts in order and,
for each, inside :meth:`ReservationStore.promise` (the host's lock held), lays the
host's current reservations over its synced state, runs the pipeline's filters on it
again and records a reservation only when it still passes. A host that no longer
passes is removed from the answer with the failing filter's reason, exactly as if that
filter had removed it; the first host that passes is promised. So no two answers ever
promise the same capacity, and the caller's contract holds (only offered hosts, each
once, ``[]`` only when every host was really removed).

Only new builds and moves are promised (``create``, ``resize``, ``live_migrate``,
``evacuate``): a rebuild stays on the instance's host.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from cortex.ids import new_uuid
from cortex.knowledge.reservations import Reservation, pending, reserve_host
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline
from cortex.pipeline.engine import PipelineResult, StepRecord, _skip_reason
from cortex.rules.device_choice import predict_claim

LOG = logging.getLogger(__name__)
STEP = "inflight_reservations"
PROMISED_INTENTS = frozenset({"create", "resize", "live_migrate", "evacuate"})
#: Hosts tried for a promise per call. Each try is a short locked transaction; past
#: this many refusals (a burst of concurrent calls for the same few hosts) the answer
#: goes out with the untried hosts unpromised rather than make the caller wait, and
#: Placement's claim stays the last word, as without Cortex.
MAX_PROMISE_TRIES = 5


def refusal(pipeline: Pipeline, request: Any, view: KnowledgeView, host: str) -> str | None:
    """The first non-shadow filter of ``pipeline`` that removes ``host`` in ``view``, and why.

    None when every filter passes it. A filter that raises counts as a refusal (the
    host is then not promised; the answer goes on to the next host).
    """
    candidate = next(c for c in request.candidates if c.host == host)
    state = view.hosts[host]
    for step in pipeline.filters:
        if step.shadow or _skip_reason(step, request):
            continue
        try:
            reason = step.plugin.bind(request, view).check(state, request, candidate)
        except Exception as exc:  # noqa: BLE001 - a plugin bug must not escape as a 500
            reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            return f"{step.name}: {reason}"
    return None


def predicted_gpus(state: Any, request: Any) -> tuple[str, ...]:
    """PCI addresses of the GPUs nova-compute would hand the request on this host (model)."""
    if state.topology is None or not state.topology.gpus:
        return ()
    claim = predict_claim(state.topology, request)
    return tuple(claim.devices) if claim is not None else ()


def promise_first(pipeline: Pipeline, request: Any, base: KnowledgeView,
                  overlaid: KnowledgeView, result: PipelineResult, store: Any,
                  ttl: float, now: datetime) -> PipelineResult:
    """``result`` with its first host promised (reservation recorded) or removed.

    ``base`` is the synced view, ``overlaid`` the request's view with reservations;
    ``store`` has ReservationStore's ``promise``; ``ttl`` in seconds (0: nothing is
    promised). Adds a step ``inflight_reservations`` to the result's steps. A store
    failure (database down) is logged and recorded; the answer then stands unpromised.
    """
    if ttl <= 0 or request.service != "nova" or request.intent not in PROMISED_INTENTS:
        return result
    started = time.perf_counter()
    record = StepRecord(STEP, "filter", "ran", hosts_in=len(result.hosts))
    judged = [h for h in result.hosts if h in base.hosts and h not in result.unknown_hosts]
    try:
        for tries, host in enumerate(judged):
            if tries == MAX_PROMISE_TRIES:
                record.detail = f"{tries} hosts refused; the rest answered unpromised"
                break
            reasons: list[str] = []
            made = store.promise(host, now, lambda current, h=host, out=reasons: _check(
                pipeline, request, base, overlaid, h, current, ttl, now, out))
            if made is not None:
                record.detail = f"promised {host} until {made.expires_at.isoformat()} ({made.id})"
                break
            record.removed[host] = reasons[0] if reasons else "refused"
    except Exception as exc:  # noqa: BLE001 - database trouble must not fail the answer
        LOG.warning("in-flight reservation failed, answer not promised: %r", exc)
        record.status, record.reason = "error", repr(exc)
    record.duration_ms = (time.perf_counter() - started) * 1000
    hosts = [h for h in result.hosts if h not in record.removed]
    weights = {h: w for h, w in result.weights.items() if h not in record.removed}
    return dataclasses.replace(result, hosts=hosts, steps=[*result.steps, record],
                               weights=weights)


def _check(pipeline: Pipeline, request: Any, base: KnowledgeView, overlaid: KnowledgeView,
           host: str, current: list[Reservation], ttl: float, now: datetime,
           reasons: list[str]) -> Reservation | None:
    """The reservation for ``host`` if it passes the filters with ``current``; else None."""
    own = request.instance_uuid
    others = [r for r in current if not (own and r.instance_uuid == own)]
    state = reserve_host(base.hosts[host], pending(others, base, now))
    view = dataclasses.replace(overlaid, hosts=MappingProxyType(
        dict(overlaid.hosts) | {host: state}), base=overlaid)
    reason = refusal(pipeline, request, view, host)
    if reason is not None:
        reasons.append(reason)
        return None
    return Reservation(new_uuid(), host, request.instance_uuid, request.network.group_id,
                       MappingProxyType(dict(request.resources)),
                       predicted_gpus(state, request), now, now + timedelta(seconds=ttl))
