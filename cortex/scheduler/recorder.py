"""What one scheduling call leaves behind: its decision, counted, logged and queued.

The scheduler service hands every call to its :class:`CallRecorder` once, at its end
(:meth:`CallRecorder.answered`, :meth:`CallRecorder.failed`), and once for a body the
HTTP layer refused (:meth:`CallRecorder.rejected`). The recorder:

1. builds the call's :class:`~cortex.decision.Decision`: the request's inputs, the
   pipeline chosen, the answer and the steps, the timing; an id when it is recorded;
2. adds the GPU demand of a recorded live create (:func:`cortex.scheduler.demand.gpu_demand`,
   with the watts of the knowledge's one energy model, :mod:`cortex.knowledge.energy`,
   under the pipeline's ``weigher_gpu_energy`` options);
3. counts a live call in the Prometheus metrics (:mod:`cortex.scheduler.metrics`):
   duration and outcome, each step's time and removals, whether the caller's first
   choice stayed first, NVLink-joined placements of multi-GPU creates, the cause of an
   answer with no host (:func:`cortex.scheduler.refusals.refusal_cause`), a ``vmware``
   flag the offered hosts overruled, an answer that went out unpromised; and logs it;
4. queues it to the decision writer (:mod:`cortex.store.decisions`) when the call's
   options ask for a record and do not hold it back for the caller.

A simulation is built and queued (when asked) the same way and counted nowhere.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from datetime import UTC, datetime
from typing import Any

from cortex.decision import Decision, HostWeights
from cortex.ids import new_uuid
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.choice import Choice
from cortex.pipeline.config import PipelineSet
from cortex.pipeline.engine import PipelineResult
from cortex.request import NovaRequest, SchedulingRequest
from cortex.rules.gpu_sets import can_place_connected
from cortex.scheduler.demand import energy_options, gpu_demand
from cortex.scheduler.metrics import SchedulerMetrics
from cortex.scheduler.promise import STEP as PROMISE_STEP
from cortex.scheduler.refusals import refusal_cause

LOG = logging.getLogger("cortex.scheduler.service")


class CallRecorder:
    """Builds, counts, logs and queues the decision of each call (module docstring).

    ``writer``: the decision writer (``submit(decision) -> bool``; None: nothing is
    recorded); ``metrics``: :class:`SchedulerMetrics` (None: nothing is counted);
    ``pipelines``: the service's, to name the cause of an answer with no host.
    """

    def __init__(self, writer: Any, metrics: SchedulerMetrics | None,
                 pipelines: PipelineSet) -> None:
        self.writer = writer
        self.metrics = metrics
        self.pipelines = pipelines

    def answered(self, request: SchedulingRequest, options: Any, call_id: str | None,
                 started: float, choice: Choice, view: KnowledgeView,
                 result: PipelineResult) -> Decision:
        """The decision of a call that got its ranking, counted and queued as asked.

        ``options``: the call's :class:`~cortex.scheduler.service.RunOptions`;
        ``view``: the synced view it was decided on (the overlays' base); ``started``:
        its ``time.perf_counter()`` at arrival. A held decision (``options.hold``) gets
        its id but is not queued: the caller records it.
        """
        live = not options.simulated
        record = options.record and self.writer is not None
        demand = (gpu_demand(request, view, tuple(result.hosts),
                             energy_options(choice.pipeline))
                  if live and record and options.demand else None)
        decision = _decision(
            request, options, call_id, started, record, choice,
            result=tuple(result.hosts), unknown_hosts=tuple(result.unknown_hosts),
            steps=tuple(result.steps), weighed=tuple(result.weighed),
            final_weights=result.weights, weighing=result.weighing,
            knowledge_version=view.version, demand=demand,
            status=200, outcome="simulated" if options.simulated else "ok")
        if live:
            if not decision.result:  # the decision log names the cause /metrics counts
                cause = refusal_cause(decision.steps, len(decision.hosts),
                                      self.pipelines.pipelines.get(decision.pipeline or ""),
                                      request, view).cause
                decision = dataclasses.replace(decision, cause=cause)
            self._contradicted(request, choice)
            self._observe(decision, request, view)
            self._account(decision, started)
        if record and not options.hold:
            self.writer.submit(decision)
        return decision

    def failed(self, request: SchedulingRequest, options: Any, call_id: str | None,
               started: float, choice: Choice | None, status: int,
               detail: str) -> Decision:
        """The decision of a call that got no ranking (``status`` 400 or 503, ``detail``).

        ``choice``: the pipeline chosen before it failed (None: it failed before).
        Recorded only for a live call whose options ask for a record.
        """
        live = not options.simulated
        record = live and options.record and self.writer is not None
        decision = _decision(request, options, call_id, started, record, choice,
                             status=status, detail=detail,
                             outcome="rejected" if status < 500 else "error")
        if live:
            if choice is not None:
                self._contradicted(request, choice)
            self._account(decision, started)
        if record:
            self.writer.submit(decision)
        return decision

    def rejected(self, service: str, status: int, detail: str, started: float) -> None:
        """Count and log a call refused before it became a request (no record)."""
        self._account(Decision(service, outcome="rejected", status=status, detail=detail),
                      started)

    def submit(self, decision: Decision) -> bool:
        """Queue a decision held back for its caller; False when not queued.

        Not queued: no writer, a decision not made to be recorded (no id), or the
        decision log's queue full.
        """
        if self.writer is None or decision.id is None:
            return False
        return bool(self.writer.submit(decision))

    def _contradicted(self, request: SchedulingRequest, choice: Choice) -> None:
        """Log and count a live call whose ``vmware`` flag the offered hosts overruled.

        Counted in ``cortex_scheduler_vmware_flag_contradictions_total{flag}`` (``flag``:
        the flag as sent, ``true`` or ``false``); the decision records it
        (``pipeline_choice``).
        """
        if choice.overruled is None:
            return
        flag = "true" if choice.overruled else "false"
        LOG.warning("nova external: vmware flag %s contradicted by every offered host known "
                    "(%s); pipeline %s chosen by the hosts' hypervisor type (request_id=%s "
                    "global_request_id=%s)", flag, choice.hosts, choice.pipeline.name,
                    request.request_id, request.global_request_id)
        if self.metrics is not None:
            self.metrics.vmware_flag_contradictions.labels(flag).inc()

    def _observe(self, decision: Decision, request: SchedulingRequest,
                 view: KnowledgeView) -> None:
        """Count what the pipeline did: steps, removals, reordering, placements, refusals.

        An answer with no host is counted by the ``cause`` its decision names.
        """
        metrics = self.metrics
        if metrics is None:
            return
        pipeline = decision.pipeline or "none"
        if decision.status == 200 and not decision.result:
            metrics.no_valid_host.labels(decision.service, pipeline, decision.cause).inc()
        for step in decision.steps:
            if step.status == "ran":
                duration, removed = metrics.step(pipeline, step.name)
                duration.observe(step.duration_ms / 1000)
                if step.kind == "filter" and not step.shadow:
                    removed.inc(len(step.removed))
        last = decision.steps[-1] if decision.steps else None
        if last is not None and last.name == PROMISE_STEP and last.status == "error":
            metrics.unpromised_answers.labels(decision.service).inc()
        choice = decision.first_choice()
        if choice:
            metrics.reordered.labels(pipeline, choice).inc()
        connected = gpu_placement(request, view, decision.result or ())
        if connected is not None:
            metrics.gpu_placements.labels(
                pipeline, "connected" if connected else "not_connected").inc()

    def _account(self, decision: Decision, started: float) -> None:
        """The call's duration and outcome in the metrics, and its log line."""
        duration = time.perf_counter() - started
        pipeline = decision.pipeline or "none"
        if self.metrics is not None:
            self.metrics.request_duration.labels(decision.service, pipeline,
                                                 str(decision.status)).observe(duration)
            self.metrics.requests.labels(decision.service, pipeline,
                                         decision.intent or "unknown", decision.outcome).inc()
        detail = f" detail={decision.detail}" if decision.detail else ""
        LOG.info("%s external: status=%d pipeline=%s hosts=%d->%d duration_ms=%.1f%s",
                 decision.service, decision.status, pipeline, len(decision.hosts),
                 len(decision.result or ()), duration * 1000, detail)


def _decision(request: SchedulingRequest, options: Any, call_id: str | None,
              started: float, record: bool, choice: Choice | None,
              **answer: Any) -> Decision:
    """The call's Decision: its inputs, ``choice``, ``answer`` (result, status...), timing.

    ``choice``: the pipeline chosen (None: the call ended before); a decision to record
    gets its id and creation time; its duration runs from ``started`` to now.
    """
    hosts = tuple(request.candidates.hosts)
    return Decision(
        service=request.service, hosts=hosts,
        weights=HostWeights(hosts, request.candidates.weights),
        request_id=request.request_id, global_request_id=request.global_request_id,
        resource_id=request.resource_id, intent=request.intent, api_request_id=call_id,
        simulated=options.simulated, overrides=options.overrides if options.simulated else None,
        id=new_uuid() if record else None, created_at=datetime.now(UTC) if record else None,
        duration_ms=(time.perf_counter() - started) * 1000,
        pipeline=choice.pipeline.name if choice else None,
        pipeline_choice=choice.record if choice else None, **answer)


def gpu_placement(request: SchedulingRequest, view: KnowledgeView,
                  hosts: tuple[str, ...] | list[str]) -> bool | None:
    """Whether the first host of a multi-GPU Nova request has NVLink-joined free GPUs.

    None when the request asks fewer than 2 GPUs, nothing was answered, or the first
    host reports no topology. Nova's PCI tracker picks the devices itself, so this
    says whether a fully NVLink-connected set was free, not which set Nova took.
    """
    if not isinstance(request, NovaRequest) or not hosts or request.gpu_count < 2:
        return None
    state = view.hosts.get(hosts[0])
    if state is None or state.topology is None:
        return None
    return can_place_connected(state.topology, request.gpu_count)
