"""The scheduler service: one call from a typed request to a typed decision.

What happens to every external call, in order (:meth:`SchedulerService.schedule`):

1. take the worker's knowledge view (:mod:`cortex.knowledge.cache`);
2. choose the pipeline (the request's ``pipeline`` field, else the first matching rule,
   else the service's default: :mod:`cortex.pipeline.choice`; the view's offered hosts
   overrule a Nova ``vmware`` flag they all contradict), with a simulation's step
   options and multipliers laid over it (:mod:`cortex.pipeline.overrides`);
3. lay the in-flight reservations over it (Nova creates and moves:
   :func:`cortex.knowledge.reservations.with_reservations`);
4. run the filters and weighers (:func:`cortex.pipeline.engine.run_pipeline`);
5. promise the answer's first host (:mod:`cortex.scheduler.promise`), or a group's
   every member at its first member's call (:mod:`cortex.scheduler.groups`);
6. count, log and record the decision (:mod:`cortex.store.decisions`).

The database waits of steps 1 and 3 to 5 end with the call's ``request_time_budget``
(:func:`cortex.db.guard.deadline`). A simulation is the same call with other
:class:`RunOptions`: promise nothing, record only when asked, count nothing. The HTTP
handlers (:mod:`cortex.api.scheduler`, :mod:`cortex.api.simulate`) parse, call this and
serialise; the simulator (:mod:`cortex.simulator`) calls it in process.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Protocol

from cortex.db import guard
from cortex.decision import EMPTY, Decision, HostWeights
from cortex.ids import new_uuid
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.commitments import counted_holds
from cortex.knowledge.reservations import Reservation, with_reservations
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.choice import Choice, PipelineNotChosen, choose_pipeline
from cortex.pipeline.config import Pipeline, PipelineSet
from cortex.pipeline.engine import PipelineResult, StepFailed, run_pipeline
from cortex.pipeline.memo import DEFAULT_LIMIT as DEFAULT_MEMO_LIMIT
from cortex.request import NovaRequest, SchedulingRequest
from cortex.rules.gpu_sets import can_place_connected
from cortex.scheduler.demand import energy_options, gpu_demand
from cortex.scheduler.groups import promise_group
from cortex.scheduler.metrics import SchedulerMetrics
from cortex.scheduler.promise import STEP as PROMISE_STEP
from cortex.scheduler.promise import promise_first, promises
from cortex.scheduler.refusals import count_refusal

LOG = logging.getLogger(__name__)
#: Seconds the database waits of one call may take when request_time_budget is 0.
NO_BUDGET_WAIT = 5.0
#: Share of the budget the optional read of the in-flight reservations may take.
READ_SHARE = 0.25
UNKNOWN_HOST_POLICIES = ("keep", "drop")
PROMISE_FAILURE_POLICIES = ("answer", "fail")


class KnowledgeSource(Protocol):
    """Where the service takes its view: :class:`cortex.knowledge.cache.KnowledgeCache`."""

    def view(self) -> KnowledgeView:
        """The current view; KnowledgeUnavailable when none may be served."""


class ReservationSource(Protocol):
    """The in-flight reservations: :class:`cortex.store.reservations.ReservationStore`."""

    def active(self, now: datetime) -> list[Reservation]:
        """Every reservation not expired at ``now``."""

    def lock_host(self, host: str, now: datetime) -> Any:
        """A context manager holding ``host``'s lock (see ReservationStore.lock_host)."""

    def reserve_if_unchanged(self, made: Reservation, now: datetime,
                             expected: frozenset[str], own: str | None) -> bool:
        """Write ``made`` if its host's reservations are ``expected`` (see ReservationStore)."""

    def rehearse(self, made: Reservation, now: datetime) -> bool:
        """Promise ``made`` and roll it back, writing nothing (see ReservationStore)."""


class DecisionRecorder(Protocol):
    """Where decisions go: :class:`cortex.store.decisions.DecisionWriter`."""

    def submit(self, record: Decision) -> bool:
        """Queue ``record`` for writing; False when it was dropped."""


@dataclass(frozen=True)
class SchedulerSettings:
    """The ``[scheduler]`` options the service follows.

    ``unknown_host_policy``: ``keep`` the hosts Cortex does not know after the judged
    ones, or ``drop`` them; ``request_time_budget``: seconds a call may take (0: no
    limit; its database waits then end after :data:`NO_BUDGET_WAIT`);
    ``reservation_ttl``: seconds a promise counts (0: promise nothing);
    ``promise_failure_policy``: ``answer`` unpromised or ``fail`` (503) when the
    promise could not be made; ``step_memo_size``: host answers kept per knowledge
    version (:mod:`cortex.pipeline.memo`, 0: none).
    """

    unknown_host_policy: str = "keep"
    request_time_budget: float = 2.0
    reservation_ttl: float = 300.0
    promise_failure_policy: str = "answer"
    step_memo_size: int = DEFAULT_MEMO_LIMIT

    def __post_init__(self) -> None:
        """Refuse a policy outside its allowed values."""
        if self.unknown_host_policy not in UNKNOWN_HOST_POLICIES:
            raise ValueError(f"unknown_host_policy must be one of {UNKNOWN_HOST_POLICIES}")
        if self.promise_failure_policy not in PROMISE_FAILURE_POLICIES:
            raise ValueError(f"promise_failure_policy must be one of {PROMISE_FAILURE_POLICIES}")

    @classmethod
    def from_conf(cls, conf: Any) -> SchedulerSettings:
        """The settings of a :class:`cortex.conf.Config`'s ``[scheduler]`` section."""
        return cls(*(conf.get("scheduler", name) for name in (
            "unknown_host_policy", "request_time_budget", "reservation_ttl",
            "promise_failure_policy", "step_memo_size")))


@dataclass(frozen=True)
class RunOptions:
    """How one call runs.

    ``promise``: reserve the answer's first host (Nova creates and moves);
    ``record``: write the decision; ``simulated``: a simulation, not a call from Nova,
    Cinder or Manila (outcome ``simulated``, nothing counted, a failure not recorded);
    ``demand``: a recorded live create that asks for GPUs carries its GPU demand
    (:func:`cortex.scheduler.demand.gpu_demand`); False for a call that places nothing
    (the Kubernetes extender's filter and prioritize); ``hold``: the decision of a call
    that got its answer is handed back unrecorded, for the caller to record
    (:meth:`SchedulerService.record`) once it knows what became of the answer (the
    extender's bind: its demand only once the pod is bound; a failed call is recorded
    as ever);
    ``pipeline``: run this pipeline of the service instead of the choice rules;
    ``step_options``/``multipliers``: override a step's options or a weigher's
    multiplier (:func:`cortex.pipeline.overrides.with_overrides`); ``now``: the time the
    reservations are judged at (None: the clock; the simulator's own time otherwise);
    ``holds``: more room counted as used, as in-flight reservations are (a commitment's
    instances placed so far while it is placed); ``commitments``: the committed
    reservations whose room counts, instead of the view's (None): a commitment being
    placed counts the ones stored when it took the commitments' lock; ``deadline``: a
    ``time.perf_counter()`` value after which no pipeline step starts (503, as when
    ``request_time_budget`` runs out, the sooner of the two; None: the budget's alone).
    """

    promise: bool = True
    record: bool = True
    simulated: bool = False
    demand: bool = True
    hold: bool = False
    pipeline: str | None = None
    step_options: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: EMPTY)
    multipliers: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    now: datetime | None = None
    holds: tuple[Reservation, ...] = ()
    commitments: tuple[Any, ...] | None = None
    deadline: float | None = None

    @property
    def overrides(self) -> dict[str, Any]:
        """The simulation's changes as a decision records them."""
        return {"options": {k: dict(v) for k, v in self.step_options.items()},
                "multipliers": dict(self.multipliers)}


#: A call from Nova, Cinder or Manila.
LIVE = RunOptions()


def simulation(pipeline: str | None = None,
               step_options: Mapping[str, Mapping[str, Any]] | None = None,
               multipliers: Mapping[str, float] | None = None, record: bool = False,
               promise: bool = False, now: datetime | None = None,
               holds: tuple[Reservation, ...] = (),
               commitments: tuple[Any, ...] | None = None) -> RunOptions:
    """The RunOptions of a simulation: nothing promised, recorded only when asked."""
    return RunOptions(promise=promise, record=record, simulated=True, pipeline=pipeline,
                      step_options=MappingProxyType(dict(step_options or {})),
                      multipliers=MappingProxyType(dict(multipliers or {})), now=now,
                      holds=holds, commitments=commitments)


def _sooner(first: float | None, second: float | None) -> float | None:
    """The earlier of two deadlines, None counting as none."""
    if first is None or second is None:
        return second if first is None else first
    return min(first, second)


#: The host the warm-up rehearses a promise on (rolled back) to open a store connection.
WARM_UP_HOST = "cortex-warm-up"


class SchedulingFailed(Exception):
    """A call that got no ranking: ``status`` 400 or 503, ``detail``, an error ``code``.

    ``decision`` is the call's decision with that outcome (recorded when the call was).
    The HTTP layer answers it as it is; Nova, Cinder and Manila keep their own order.
    """

    def __init__(self, status: int, detail: str, code: str | None, decision: Decision) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code, self.decision = status, detail, code, decision


class _Failure(Exception):
    """Raised inside :meth:`SchedulerService.schedule` to end a call early."""

    def __init__(self, status: int, detail: str, code: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code


class SchedulerService:
    """Runs scheduling calls: choose, view, reservations, run, promise, record.

    ``pipelines`` and ``settings`` decide what runs; ``knowledge`` gives the view;
    ``reservations`` (None: none) and ``recorder`` (None: nothing is recorded) are the
    write side; ``metrics`` (None: nothing is counted) the Prometheus metrics.
    """

    def __init__(self, pipelines: PipelineSet, knowledge: KnowledgeSource,
                 settings: SchedulerSettings | None = None,
                 reservations: ReservationSource | None = None,
                 recorder: DecisionRecorder | None = None,
                 metrics: SchedulerMetrics | None = None) -> None:
        self.pipelines = pipelines
        self.knowledge = knowledge
        self.settings = settings or SchedulerSettings()
        self.reservations = reservations
        self.recorder = recorder
        self.metrics = metrics
        self._memo_dropped = metrics.step_answers_dropped.inc if metrics is not None else None

    def schedule(self, request: SchedulingRequest, options: RunOptions = LIVE,
                 started: float | None = None, call_id: str | None = None) -> Decision:
        """Decide ``request``: the hosts best first, and how that came about.

        ``started``: the call's ``time.perf_counter()`` at arrival (its budget counts
        from there; default now); ``call_id``: Cortex's own request id, kept in the
        decision. Raises :class:`SchedulingFailed` (400: no pipeline fits; 503: no
        knowledge, a fail-closed step failed, the budget ran out, or the promise failed
        under ``promise_failure_policy = fail``).
        """
        started = time.perf_counter() if started is None else started
        live, choice = not options.simulated, None
        if live and isinstance(request, NovaRequest) and request.disbelieved_intent:
            self._disbelieved(request)
        try:
            view = self._view(started)
            choice = self._choose(request, options, view)
            result = self._run(choice.pipeline, request, view, options, started)
        except _Failure as failure:
            record = live and options.record and self.recorder is not None
            failed = _decision(request, options, call_id, started, record, choice,
                               status=failure.status, detail=failure.detail,
                               outcome="rejected" if failure.status < 500 else "error")
            self._finish(failed, started, options, record)
            raise SchedulingFailed(failure.status, failure.detail, failure.code,
                                   failed) from None
        record = options.record and self.recorder is not None
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
            self._observe(decision, request, view)
        self._finish(decision, started, options, record and not options.hold)
        return decision

    def record(self, decision: Decision) -> bool:
        """Record a decision :meth:`schedule` held back (``RunOptions.hold``).

        ``decision`` as it was handed back, or changed by the caller (its ``demand``
        dropped, its ``id`` replaced). False when it was not queued: no recorder, a
        decision not made to be recorded (no id), or the decision log's queue full.
        """
        if self.recorder is None or decision.id is None:
            return False
        return self.recorder.submit(decision)

    def prepare(self, decision: Decision) -> None:
        """Make the metric series a live call of ``decision``'s shape counts into.

        Its pipeline's and steps' (:meth:`SchedulerMetrics.prepare`), the promise
        step's among them: a worker's warm-up calls it for each shape it asked.
        """
        if self.metrics is not None and decision.pipeline:
            self.metrics.prepare(decision.service, decision.pipeline,
                                 [*(s.name for s in decision.steps), PROMISE_STEP])

    def open_reservation_store(self) -> None:
        """Open a connection of the reservation store's pool before the first promise.

        Rehearses a promise on a host no reservation names (the store writes it and
        rolls it back: :meth:`ReservationSource.rehearse`): nothing is reserved, and on
        PostgreSQL the session has planned every statement of the promise's function
        (revision 0015). A fresh connection's first promise took 3.3-5.1 ms where the
        next took 0.6-0.8, and after a refused promise (the warm-up's until then) its
        upsert was still unplanned. A worker's warm-up calls it once. Database trouble
        is the first call's to meet: logged here, never raised.
        """
        if self.reservations is None or self.settings.reservation_ttl <= 0:
            return
        now = datetime.now(UTC)
        made = Reservation(new_uuid(), WARM_UP_HOST, new_uuid(), None, MappingProxyType({}),
                           (), now, now)  # rolled back; and, were it kept, expired at once
        try:
            self.reservations.rehearse(made, now)
        except Exception as exc:  # noqa: BLE001 - the first call meets it again
            LOG.warning("warm-up: reservation store unreachable: %r", exc)

    def refused(self, service: str, status: int, detail: str, started: float) -> None:
        """Count and log a call the HTTP layer refused before it became a request.

        A body that is not JSON, not valid against the schema, or not parsable: nothing
        worth recording, but the call was made.
        """
        self._account(Decision(service, outcome="rejected", status=status, detail=detail),
                      started)

    # -- the steps of a call -------------------------------------------------------------

    def _view(self, started: float) -> KnowledgeView:
        """Step 1 within the call's budget: the worker's knowledge view (503 when none)."""
        with guard.deadline(self._wait_left(started)):
            try:
                return self.knowledge.view()
            except KnowledgeUnavailable as exc:
                raise _Failure(503, f"knowledge unavailable: {exc}") from None

    def _choose(self, request: SchedulingRequest, options: RunOptions,
                view: KnowledgeView) -> Choice:
        """The pipeline to run, a simulation's choice and overrides laid over it.

        The offered hosts of ``view`` overrule a Nova ``vmware`` flag they all contradict
        (:func:`cortex.pipeline.choice.flag_contradiction`): logged and counted for a
        live call (:meth:`_contradicted`).
        """
        try:
            choice = choose_pipeline(self.pipelines, request, options.pipeline,
                                     options.step_options, options.multipliers, view)
        except PipelineNotChosen as exc:
            raise _Failure(400, str(exc), "cortex.pipeline_not_chosen") from None
        self._contradicted(request, choice, options)
        return choice

    def _wait_left(self, started: float) -> float:
        """Seconds the call's database waits may still take (its budget, else the default)."""
        return (self.settings.request_time_budget or NO_BUDGET_WAIT) - (
            time.perf_counter() - started)

    def _run(self, pipeline: Pipeline, request: SchedulingRequest, view: KnowledgeView,
             options: RunOptions, started: float) -> PipelineResult:
        """Steps 3 to 5 on ``view`` within the call's budget; the (promised) result."""
        budget = self.settings.request_time_budget
        with guard.deadline(self._wait_left(started)):
            now = options.now or datetime.now(UTC)
            overlaid = self._with_reservations(request, view, now, options.holds,
                                               options.commitments)
            try:
                result = run_pipeline(pipeline, request, overlaid,
                                      self.settings.unknown_host_policy,
                                      deadline=_sooner(started + budget if budget else None,
                                                       options.deadline),
                                      memo_limit=self.settings.step_memo_size,
                                      memo_dropped=self._memo_dropped)
            except StepFailed as exc:
                raise _Failure(503, str(exc), "cortex.step_failed") from None
            if options.promise and self._promises(request):
                result = promise_group(pipeline, request, view, overlaid, result,
                                       self.reservations, self.settings.reservation_ttl, now,
                                       self.metrics) or promise_first(
                    pipeline, request, view, overlaid, result, self.reservations,
                    self.settings.reservation_ttl, now)
                self._unpromised(request, result, options)
        return result

    def _promises(self, request: SchedulingRequest) -> bool:
        """Whether the call is promised: a Nova create or move, with a store and a TTL."""
        return (self.reservations is not None and self.settings.reservation_ttl > 0
                and promises(request))

    def _with_reservations(self, request: SchedulingRequest, view: KnowledgeView,
                           now: datetime, holds: tuple[Reservation, ...] = (),
                           commitments: tuple[Any, ...] | None = None) -> KnowledgeView:
        """``view`` with the in-flight reservations counted (Nova only; ``view`` when none).

        Also counted: other projects' committed room (:mod:`cortex.knowledge.commitments`;
        ``commitments``, or the view's when None) and ``holds``. A database failure
        reading the reservations is logged and the call goes on without them, as the
        knowledge view itself keeps serving through an outage. Reading the table (when
        the feed does not listen) may take :data:`READ_SHARE` of the call's budget at
        most, so that a database that hangs leaves the pipeline and the promise their
        time.
        """
        if not isinstance(request, NovaRequest):
            return view
        committed = view.commitments if commitments is None else commitments
        active = [*holds, *counted_holds(committed, view.hosts, request.project_id, now)]
        if self.reservations is not None and self.settings.reservation_ttl:
            budget = self.settings.request_time_budget or NO_BUDGET_WAIT
            try:
                with guard.deadline(budget * READ_SHARE):
                    active.extend(self.reservations.active(now))
            except Exception as exc:  # noqa: BLE001 - database trouble must not fail it
                LOG.warning("in-flight reservations unreadable, not counted: %r", exc)
        if not active:
            return view
        return with_reservations(view, active, now, request.instance_uuid)

    def _unpromised(self, request: SchedulingRequest, result: PipelineResult,
                    options: RunOptions) -> None:
        """Apply ``promise_failure_policy`` when the promise step failed.

        The step fails when the reservation store raised (the database failed, did not
        answer within the call's budget, or is marked down: :mod:`cortex.db.guard`).
        ``answer``: the ranking goes out unpromised, logged by
        :func:`~cortex.scheduler.promise.promise_first` and counted in
        ``cortex_scheduler_unpromised_answers_total``; ``fail``: 503, so Nova keeps its
        own order (the caller contract's reaction to an internal failure).
        """
        step = result.steps[-1] if result.steps else None
        if step is None or step.name != PROMISE_STEP or step.status != "error":
            return
        if self.settings.promise_failure_policy == "fail":
            raise _Failure(503, f"in-flight reservation not made: {step.reason}",
                           "cortex.promise_failed")
        if self.metrics is not None and not options.simulated:
            self.metrics.unpromised_answers.labels(request.service).inc()

    # -- counting and recording ----------------------------------------------------------

    def _disbelieved(self, request: NovaRequest) -> None:
        """Log and count a Nova call whose claimed intent its flags and spec do not back.

        The call runs as a create (:func:`cortex.request.nova.intent_claims`). Counted in
        ``cortex_scheduler_disbelieved_intents_total{claimed}``.
        """
        LOG.warning("nova external: intent %r claimed by _nova_check_type or the flags is not "
                    "backed by the body (flags rebuild/resize/live, force_hosts); treated as a "
                    "create (request_id=%s)", request.disbelieved_intent, request.request_id)
        if self.metrics is not None:
            self.metrics.disbelieved_intents.labels(request.disbelieved_intent).inc()

    def _contradicted(self, request: SchedulingRequest, choice: Choice,
                      options: RunOptions) -> None:
        """Log and count a live call whose ``vmware`` flag the offered hosts overruled.

        Counted in ``cortex_scheduler_vmware_flag_contradictions_total{flag}`` (``flag``:
        the flag as sent, ``true`` or ``false``); the decision records it
        (``pipeline_choice``). A simulation only records it.
        """
        if choice.overruled is None or options.simulated:
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
        """Count what the pipeline did: step times, removals, reordering, NVLink placements."""
        metrics = self.metrics
        if metrics is None:
            return
        count_refusal(metrics, decision, request, view, self.pipelines)
        pipeline = decision.pipeline or "none"
        for step in decision.steps:
            if step.status == "ran":
                duration, removed = metrics.step(pipeline, step.name)
                duration.observe(step.duration_ms / 1000)
                if step.kind == "filter" and not step.shadow:
                    removed.inc(len(step.removed))
        choice = decision.first_choice()
        if choice:
            metrics.reordered.labels(pipeline, choice).inc()
        connected = gpu_placement(request, view, decision.result or ())
        if connected is not None:
            metrics.gpu_placements.labels(
                pipeline, "connected" if connected else "not_connected").inc()

    def _finish(self, decision: Decision, started: float, options: RunOptions,
                record: bool) -> None:
        """Count and log a call (not a simulation); hand it to the recorder when asked."""
        if not options.simulated:
            self._account(decision, started)
        if record and self.recorder is not None:
            self.recorder.submit(decision)

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


def _decision(request: SchedulingRequest, options: RunOptions, call_id: str | None,
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
