"""The scheduler service: one call from a typed request to a typed decision.

What happens to every external call, in order (:meth:`SchedulerService.schedule`):

1. take the worker's knowledge view (:mod:`cortex.knowledge.cache`);
2. choose the pipeline (the request's ``pipeline`` field, else the first matching rule,
   else the service's default: :mod:`cortex.pipeline.choice`; the view's offered hosts
   overrule a Nova ``vmware`` flag they all contradict), with a simulation's step
   options and multipliers laid over it (:mod:`cortex.pipeline.overrides`);
3. ask the knowledge for the request's view, every overlay applied (a Nova call's:
   other projects' committed room, the in-flight reservations and the caller's holds:
   :func:`cortex.knowledge.reservations.request_view`);
4. run the filters and weighers (:func:`cortex.pipeline.engine.run_pipeline`);
5. promise the answer's first host, or a group's every member at its first member's
   call (:func:`cortex.scheduler.promise.promise`);
6. hand the call to its recorder (:class:`cortex.scheduler.recorder.CallRecorder`),
   which builds the decision, adds its GPU demand, counts and logs it, and queues it
   to the decision writer (:mod:`cortex.store.decisions`).

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
from cortex.decision import EMPTY, Decision
from cortex.ids import new_uuid
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.reservations import LiveReservations, Reservation, request_view
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.choice import PipelineNotChosen, choose_pipeline
from cortex.pipeline.config import PipelineSet
from cortex.pipeline.engine import StepFailed, run_pipeline
from cortex.pipeline.memo import DEFAULT_LIMIT as DEFAULT_MEMO_LIMIT
from cortex.request import NovaRequest, SchedulingRequest
from cortex.scheduler.metrics import SchedulerMetrics
from cortex.scheduler.promise import STEP as PROMISE_STEP
from cortex.scheduler.promise import PromiseFailed, promise
from cortex.scheduler.recorder import CallRecorder

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


class CallRecord(Protocol):
    """Where every call ends: :class:`cortex.scheduler.recorder.CallRecorder`.

    It builds the call's decision, counts and logs it, and queues it for writing.
    """

    def answered(self, request: SchedulingRequest, options: Any, call_id: str | None,
                 started: float, choice: Any, view: KnowledgeView, result: Any) -> Decision:
        """The decision of a call that got its ranking (see CallRecorder.answered)."""

    def failed(self, request: SchedulingRequest, options: Any, call_id: str | None,
               started: float, choice: Any, status: int, detail: str) -> Decision:
        """The decision of a call that got none (see CallRecorder.failed)."""

    def rejected(self, service: str, status: int, detail: str, started: float) -> None:
        """Count and log a call refused before it became a request."""

    def submit(self, decision: Decision) -> bool:
        """Queue a decision held back for its caller; False when not queued."""


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


def _failure(exc: Exception) -> tuple[int, str, str | None]:
    """``(status, detail, code)`` of a call ended by ``exc`` (one of :data:`_ENDS`)."""
    if isinstance(exc, KnowledgeUnavailable):
        return 503, f"knowledge unavailable: {exc}", None
    if isinstance(exc, PipelineNotChosen):
        return 400, str(exc), "cortex.pipeline_not_chosen"
    if isinstance(exc, PromiseFailed):
        return 503, f"in-flight reservation not made: {exc}", "cortex.promise_failed"
    return 503, str(exc), "cortex.step_failed"


#: What ends a call without a ranking: no knowledge (503), no pipeline (400), a
#: fail-closed step or the budget (503), the promise under ``promise_failure_policy =
#: fail`` (503).
_ENDS = (KnowledgeUnavailable, PipelineNotChosen, StepFailed, PromiseFailed)


class SchedulerService:
    """Runs scheduling calls: view, choose, overlay, run, promise, record.

    ``pipelines`` and ``settings`` decide what runs; ``knowledge`` gives the view;
    ``reservations`` (None: none) and ``recorder`` (None: nothing is recorded) are the
    write side; ``metrics`` (None: nothing is counted) the Prometheus metrics. Every
    call ends in ``calls`` (:class:`CallRecord`; None: a
    :class:`~cortex.scheduler.recorder.CallRecorder` of ``recorder`` and ``metrics``),
    which builds, counts, logs and queues its decision.
    """

    def __init__(self, pipelines: PipelineSet, knowledge: KnowledgeSource,
                 settings: SchedulerSettings | None = None,
                 reservations: ReservationSource | None = None,
                 recorder: DecisionRecorder | None = None,
                 metrics: SchedulerMetrics | None = None,
                 calls: CallRecord | None = None) -> None:
        self.pipelines = pipelines
        self.knowledge = knowledge
        self.settings = settings or SchedulerSettings()
        self.reservations = reservations
        self.recorder = recorder
        self.metrics = metrics
        self.calls = calls or CallRecorder(recorder, metrics, pipelines)
        self._memo_dropped = metrics.step_answers_dropped.inc if metrics is not None else None

    def schedule(self, request: SchedulingRequest, options: RunOptions = LIVE,
                 started: float | None = None, call_id: str | None = None) -> Decision:
        """Decide ``request``: the hosts best first, and how that came about.

        One line (module docstring): the view, the pipeline, the view with every
        overlay applied, the pipeline's run, the promise, the record. ``started``: the
        call's ``time.perf_counter()`` at arrival (its budget counts from there;
        default now); ``call_id``: Cortex's own request id, kept in the decision.
        Raises :class:`SchedulingFailed` (400: no pipeline fits; 503: no knowledge, a
        fail-closed step failed, the budget ran out, or the promise failed under
        ``promise_failure_policy = fail``).
        """
        started = time.perf_counter() if started is None else started
        if not options.simulated and isinstance(request, NovaRequest) \
                and request.disbelieved_intent:
            self._disbelieved(request)
        settings, choice = self.settings, None
        try:
            with guard.deadline(self._wait_left(started)):
                view = self.knowledge.view()
            choice = choose_pipeline(self.pipelines, request, options.pipeline,
                                     options.step_options, options.multipliers, view)
            with guard.deadline(self._wait_left(started)):
                now = options.now or datetime.now(UTC)
                overlaid = view
                if isinstance(request, NovaRequest):
                    overlaid = request_view(view, self._in_flight(now), now,
                                            request.instance_uuid, request.project_id,
                                            options.holds, options.commitments)
                result = run_pipeline(choice.pipeline, request, overlaid,
                                      settings.unknown_host_policy,
                                      deadline=self._deadline(started, options),
                                      memo_limit=settings.step_memo_size,
                                      memo_dropped=self._memo_dropped)
                if options.promise and self.reservations is not None \
                        and settings.reservation_ttl > 0:
                    result = promise(choice.pipeline, request, view, overlaid, result,
                                     self.reservations, settings.reservation_ttl, now,
                                     self.metrics,
                                     settings.promise_failure_policy == "fail")
        except _ENDS as exc:
            status, detail, code = _failure(exc)
            failed = self.calls.failed(request, options, call_id, started, choice, status,
                                       detail)
            raise SchedulingFailed(status, detail, code, failed) from None
        return self.calls.answered(request, options, call_id, started, choice, view, result)

    def record(self, decision: Decision) -> bool:
        """Record a decision :meth:`schedule` held back (``RunOptions.hold``).

        ``decision`` as it was handed back, or changed by the caller (its ``demand``
        dropped, its ``id`` replaced). False when it was not queued: no recorder, a
        decision not made to be recorded (no id), or the decision log's queue full.
        """
        return self.calls.submit(decision)

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
        self.calls.rejected(service, status, detail, started)

    # -- what the call's line needs ------------------------------------------------------

    def _wait_left(self, started: float) -> float:
        """Seconds the call's database waits may still take (its budget, else the default)."""
        return (self.settings.request_time_budget or NO_BUDGET_WAIT) - (
            time.perf_counter() - started)

    def _deadline(self, started: float, options: RunOptions) -> float | None:
        """The ``time.perf_counter()`` value after which no pipeline step starts (None: none).

        The sooner of the call's ``request_time_budget`` and ``options.deadline``.
        """
        budget = self.settings.request_time_budget
        return _sooner(started + budget if budget else None, options.deadline)

    def _in_flight(self, now: datetime) -> list[Reservation] | LiveReservations:
        """The reservations not expired at ``now``; none without a store or a TTL.

        A database failure reading them is logged and the call goes on without them, as
        the knowledge view itself keeps serving through an outage. Reading the table
        (when the feed does not listen) may take :data:`READ_SHARE` of the call's budget
        at most, so that a database that hangs leaves the pipeline and the promise their
        time.
        """
        if self.reservations is None or not self.settings.reservation_ttl:
            return []
        budget = self.settings.request_time_budget or NO_BUDGET_WAIT
        try:
            with guard.deadline(budget * READ_SHARE):
                live = getattr(self.reservations, "live", None)
                return live(now) if live is not None else list(self.reservations.active(now))
        except Exception as exc:  # noqa: BLE001 - database trouble must not fail it
            LOG.warning("in-flight reservations unreadable, not counted: %r", exc)
            return []

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
