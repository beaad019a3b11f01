"""Placing a commitment: each committed instance through the pipelines, as Nova would ask.

A commitment (:mod:`cortex.knowledge.commitments`) is placed when it is created: its
``count`` instances one after the other, each as the body Nova would send for a VM of
the commitment's shape (the simulator's :func:`cortex.simulator.replay.request_body`)
with every host of the zone a candidate and the owner's project (its tenant isolation
and allowed projects apply), through the pipeline the choice rules give it, as a
simulation that promises and records nothing. The free room of every commitment whose
period meets the new one's (the owner's own too: one starting a second later holds its
room for most of the same period) and the instances placed so far count as used
(:class:`RunOptions` ``holds``), so room is never promised twice for one moment, and a
placement is never one the scheduler itself would refuse. Each instance's hold is the
request's resources on the first host of the answer and the GPUs nova-compute would
hand it there (:func:`cortex.scheduler.promise.predicted_gpus`). All or nothing: when
an instance finds no host, :class:`CommitmentRefused` says how many fitted.

The write is :func:`cortex.store.commitments.write_commitment`: in one transaction it
takes the commitments' lock, hands :func:`place` the stored commitments (a worker's view
may not carry one another worker just stored) and stores the result, so concurrent
commitments never count the same room twice.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType

from cortex.knowledge.commitments import (
    Commitment,
    Hold,
    as_reservation,
    overlapping_holds,
)
from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.request.nova import NovaRequest
from cortex.scheduler.promise import predicted_gpus
from cortex.scheduler.service import SchedulerService, SchedulingFailed, simulation
from cortex.simulator.replay import request_body
from cortex.simulator.trace import TraceRequest


class CommitmentRefused(Exception):
    """The commitment cannot be placed; the message says how much of it fitted."""


class CommitmentInvalid(ValueError):
    """What was asked is not a commitment (an API 400, exit status 2); the message says why."""


class CommitmentTimedOut(Exception):
    """Placing every instance took longer than the caller's budget; nothing was stored (503)."""


#: Seconds of the budget left for storing the commitment once its instances are placed.
STORE_MARGIN = 0.2


def place(scheduler: SchedulerService, spec: Commitment, now: datetime,
          commitments: Sequence[Commitment] | None = None,
          until: float | None = None) -> Commitment:
    """``spec`` (a commitment without id and holds yet) placed: its id, a hold per instance.

    ``commitments``: the stored commitments whose room counts (None: the view's);
    ``until``: the ``time.monotonic()`` by which every instance must be placed (None:
    no limit), else CommitmentTimedOut. CommitmentRefused when an instance finds no
    room.

    Raises ValueError for a spec that cannot be a commitment (end before start, no
    hosts in the zone) and SchedulingFailed when the scheduler cannot answer (503).
    """
    if spec.end_at <= spec.start_at:
        raise ValueError("end_at must be after start_at")
    view = scheduler.knowledge.view()
    zone = [name for name, state in view.hosts.items()
            if spec.availability_zone in (None, state.availability_zone)]
    if not zone:
        raise ValueError(f"no host known in availability zone {spec.availability_zone!r}")
    entries = [{"host": name, "hypervisor_hostname": next(iter(view.hosts[name].nodes), name)}
               for name in zone]
    weights = dict.fromkeys(zone, 0.0)
    commitment_id = str(uuidlib.uuid4())
    # Asked as the owner (tenant isolation and allowed projects apply as to its VMs);
    # every commitment's room is counted here (the service counts none of its own), as
    # it will be held at some moment of the new commitment's period.
    stored = tuple(view.commitments if commitments is None else commitments)
    counted = overlapping_holds(stored, view.hosts, spec.start_at, spec.end_at, now)
    holds: list[Hold] = []
    placed: list[Reservation] = []
    for index in range(spec.count):
        if until is not None and time.monotonic() > until:
            raise CommitmentTimedOut(
                f"{index} of {spec.count} instances were placed within the request "
                "budget; nothing was committed (commit fewer instances at a time)")
        request = _request(spec, f"{commitment_id}-{index}", entries, weights)
        try:
            decision = scheduler.schedule(request, simulation(
                now=now, holds=(*counted, *placed), commitments=()))
        except SchedulingFailed as exc:
            if exc.status == 503:
                raise
            decision = exc.decision
        if not decision.result:
            raise CommitmentRefused(
                f"{index} of {spec.count} instances fit in availability zone "
                f"{spec.availability_zone or '(any)'}; nothing was committed")
        host = decision.result[0]
        state = with_reservations(view, [*counted, *placed], now).hosts[host]
        hold = Hold(str(uuidlib.uuid4()), commitment_id, host,
                    MappingProxyType(dict(request.resources)), predicted_gpus(state, request),
                    sum(1 for i in view.hosts[host].instances if i.project_id == spec.project_id))
        holds.append(hold)
        placed.append(as_reservation(hold, now, spec.end_at))
    return replace(spec, id=commitment_id, created_at=now, holds=tuple(holds))


def _request(spec: Commitment, name: str, entries: list[dict[str, str]],
             weights: dict[str, float]) -> NovaRequest:
    """The Nova request of one committed instance.

    With GPUs: dedicated CPUs and one guest NUMA cell, two from 8 GPUs (a board's GPUs
    sit on both of its nodes), as the simulator's Alibaba pods ask.
    """
    trace = TraceRequest(name, 0.0, None, spec.gpus, 0, spec.vcpus, spec.memory_mb,
                         numa_nodes=(2 if spec.gpus >= 8 else 1) if spec.gpus else 0,
                         cpu_policy="dedicated" if spec.gpus else "shared",
                         products=spec.products)
    body = request_body(trace, entries, weights, pipeline="")
    body.pop("pipeline")  # the choice rules decide, as for Nova's own calls
    body["spec"]["nova_object.data"]["project_id"] = spec.project_id
    body["context"]["project_id"] = spec.project_id
    return NovaRequest.from_body(body)
