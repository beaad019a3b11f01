"""Promise the answer's first host: re-check it under its lock and record the reservation.

The pipeline ran on a view with the in-flight reservations of a moment ago laid over
it; a concurrent call (another thread, worker or replica) may have promised the same
capacity since. :func:`promise_first` therefore takes the answer's hosts in order and,
for each, holds the host's lock in the reservation store
(:meth:`cortex.store.reservations.ReservationStore.lock_host`), lays the host's current
reservations over its synced state, runs the pipeline's filters on it again
(:func:`cortex.pipeline.engine.refusal`) and writes a reservation only when it still
passes. When the reservations read under the lock are the very ones the request's view
counted on the host (:func:`cortex.knowledge.reservations.counted_on`: no other call
promised it meanwhile, the usual case), the state is the one the pipeline just passed
and the filters are not run again; they are whenever a filter of the call failed and
was skipped by its policy, since the re-check counts a raising filter as a refusal
(at 1,000 GPU hosts this took the re-check from 0.3-0.5 ms to 0.1 ms of every create:
the filters on one host, and the overlay built for them). The store is then asked to
write the reservation only if it finds those very reservations under the lock
(``reserve_if_unchanged``): one round trip on PostgreSQL instead of a read and then a
write; when it finds others, the host is re-checked under its lock as above. A host
that no longer passes is removed from the answer with the failing filter's reason,
exactly as if that filter had removed it; the first host that passes is promised. So
no two answers ever promise the same capacity, and the caller's contract holds (only
offered hosts, each once, ``[]`` only when every host was really removed).

Only new builds and moves are promised (``create``, ``resize``, ``live_migrate``,
``evacuate``): a rebuild stays on the instance's host.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import ChainMap
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from cortex.decision import HostWeights, StepResult
from cortex.ids import new_uuid
from cortex.knowledge.reservations import (
    Reservation,
    counted_on,
    others_on,
    pending,
    reserve_host,
)
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline
from cortex.pipeline.engine import PipelineResult, refusal
from cortex.rules.device_choice import predict_claim

LOG = logging.getLogger(__name__)
STEP = "inflight_reservations"
PROMISED_INTENTS = frozenset({"create", "resize", "live_migrate", "evacuate"})
#: Hosts tried for a promise per call. Each try is a short locked transaction; past
#: this many refusals (a burst of concurrent calls for the same few hosts) the answer
#: goes out with the untried hosts unpromised rather than make the caller wait, and
#: Placement's claim stays the last word, as without Cortex.
MAX_PROMISE_TRIES = 5


def predicted_gpus(state: Any, request: Any) -> tuple[str, ...]:
    """PCI addresses of the GPUs nova-compute would hand the request on this host (model)."""
    if state.topology is None or not state.topology.gpus:
        return ()
    claim = predict_claim(state.topology, request)
    return tuple(claim.devices) if claim is not None else ()


def promises(request: Any) -> bool:
    """Whether a call of ``request`` is promised: a Nova create or move, a pod's bind.

    A Kubernetes pod is promised only where its call asks for it (the extender's bind,
    :mod:`cortex.services.kubernetes`); its filter and prioritize calls promise nothing.
    """
    return request.service in ("nova", "kubernetes") and request.intent in PROMISED_INTENTS


def promise_first(pipeline: Pipeline, request: Any, base: KnowledgeView,
                  overlaid: KnowledgeView, result: PipelineResult, store: Any,
                  ttl: float, now: datetime) -> PipelineResult:
    """``result`` with its first host promised (reservation recorded) or removed.

    ``base`` is the synced view, ``overlaid`` the request's view with reservations;
    ``store`` has ReservationStore's ``lock_host``; ``ttl`` in seconds. Adds a step
    ``inflight_reservations`` to the result's steps. A store failure (database down) is
    logged and recorded as the step's error; the answer then stands unpromised.
    """
    started = time.perf_counter()
    removed: dict[str, str] = {}
    status, reason, detail = "ran", None, None
    unknown = frozenset(result.unknown_hosts)
    judged = (h for h in result.hosts if h in base.hosts and h not in unknown)
    cleanly = not any(s.kind == "filter" and s.status == "error" for s in result.steps)
    try:
        for tries, host in enumerate(judged):
            if tries == MAX_PROMISE_TRIES:
                detail = f"{tries} hosts refused; the rest answered unpromised"
                break
            made = (_promise_unchanged(request, base, overlaid, host, store, ttl, now)
                    if cleanly else None)
            if made is None:
                with store.lock_host(host, now) as held:
                    made, refused = _recheck(pipeline, request, base, overlaid, host,
                                             held.reservations, ttl, now, cleanly)
                    if made is not None:
                        held.reserve(made)
            if made is not None:
                detail = f"promised {host} until {made.expires_at.isoformat()} ({made.id})"
                break
            removed[host] = refused
    except Exception as exc:  # noqa: BLE001 - database trouble must not fail the answer
        LOG.warning("in-flight reservation failed, answer not promised: %r", exc)
        status, reason = "error", repr(exc)
    step = StepResult(STEP, "filter", status, (time.perf_counter() - started) * 1000, reason,
                      hosts_in=len(result.hosts), removed=removed, detail=detail)
    if not removed:  # the common case: the answer stands as it is
        return dataclasses.replace(result, steps=[*result.steps, step])
    hosts = [h for h in result.hosts if h not in removed]
    final = result.weights
    kept = [(h, w) for h, w in zip(final.names, final.values_in_order, strict=True)
            if h not in removed]
    weights = HostWeights([h for h, _ in kept], [w for _, w in kept])
    return dataclasses.replace(result, hosts=hosts, steps=[*result.steps, step],
                               weights=weights)


def _promise_unchanged(request: Any, base: KnowledgeView, overlaid: KnowledgeView,
                       host: str, store: Any, ttl: float, now: datetime) -> Reservation | None:
    """The reservation written on ``host`` when its reservations are still those counted.

    ``overlaid`` counted the pending ones of the reservations it lists on ``host``
    (:func:`~cortex.knowledge.reservations.counted_on`); when the store finds exactly
    those under the host's lock, the host is in the state the pipeline passed, and the
    reservation is written in the same step (``reserve_if_unchanged``: one round trip
    on PostgreSQL, where the read under the lock and then the write take two). None,
    nothing written, when the store found others, or when ``overlaid`` cannot tell
    what it counted (a hold or a commitment of the call's own among them): the caller
    then re-checks under the lock.
    """
    counted = counted_on(overlaid, host)
    if counted is None:
        return None
    own = request.instance_uuid
    listed = others_on(overlaid.reservations, host, own)
    if frozenset(r.id for r in pending(listed, base, now)) != counted:
        return None
    made = _reservation(request, host, overlaid.hosts[host], ttl, now)
    expected = frozenset(r.id for r in listed)
    return made if store.reserve_if_unchanged(made, now, expected, own) else None


def _reservation(request: Any, host: str, state: Any, ttl: float,
                 now: datetime) -> Reservation:
    """The reservation of ``request`` on ``host`` (in ``state``) from ``now`` for ``ttl`` s."""
    return Reservation(new_uuid(), host, request.instance_uuid, request.network.group_id,
                       MappingProxyType(dict(request.resources)),
                       predicted_gpus(state, request), now, now + timedelta(seconds=ttl))


def _recheck(pipeline: Pipeline, request: Any, base: KnowledgeView, overlaid: KnowledgeView,
             host: str, current: list[Reservation], ttl: float, now: datetime,
             cleanly: bool = False) -> tuple[Reservation | None, str]:
    """``(the reservation, "")`` when ``host`` passes the filters with ``current``.

    Else ``(None, the failing filter and its reason)``. The request's own earlier
    reservation (Nova asking again for the same instance) does not count, nor do other
    hosts' (a store may hand them all). ``cleanly``: no filter of the call failed, so a
    host whose reservations are the ones ``overlaid`` counted passes as it did there.
    """
    own = request.instance_uuid
    others = pending(others_on(current, host, own), base, now)
    if cleanly and counted_on(overlaid, host) == frozenset(r.id for r in others):
        state = overlaid.hosts[host]  # the state the pipeline passed, nothing new on it
    else:
        state = reserve_host(base.hosts[host], others)
        # the one host laid over the request's view, not copying every other host's entry
        view = dataclasses.replace(overlaid, hosts=MappingProxyType(
            ChainMap({host: state}, overlaid.hosts)),  # type: ignore[arg-type]  # only read
            base=overlaid,
            overlaid=overlaid.overlaid | {host})
        reason = refusal(pipeline, request, view, host)
        if reason is not None:
            return None, reason
    return _reservation(request, host, state, ttl, now), ""
