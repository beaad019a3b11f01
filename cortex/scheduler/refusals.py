"""Why a call found no valid host: the step that removed the last hosts.

A Nova build fails with NoValidHost when the answer is empty. The cause of such an
answer is read from its decision's step trace: the last filter that ran (not a shadow)
and removed hosts removed the last ones; its name is the cause, and one of its reasons
for one of those hosts the reason. Two causes a step's name hides get their own names:
where the capacity taken by what is laid over the synced view (other projects'
committed room, :mod:`cortex.knowledge.commitments`; in-flight reservations,
:mod:`cortex.knowledge.reservations`) made the step remove a host it passes on the
synced view, the cause is ``commitments`` when the host carries other projects'
committed room and ``reservations`` otherwise. ``filter_failover_room`` is its own step
already. A call whose candidates Cortex knows none of (all dropped by
``unknown_host_policy = drop``) is ``unknown_hosts``; one with no candidates,
``no_candidates``.

Counted in ``cortex_scheduler_no_valid_host_total{service,pipeline,cause}``
(:class:`cortex.scheduler.metrics.SchedulerMetrics`) by the call recorder
(:mod:`cortex.scheduler.recorder`) for every live call; the capacity answers
(:mod:`cortex.simulator.capacity`) name the step that stops the next instance with
:func:`refusal_cause`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from cortex.decision import NO_CANDIDATES, UNKNOWN_HOSTS, StepResult, last_removal
from cortex.knowledge.reservations import counted_holds
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline
from cortex.request import NovaRequest, SchedulingRequest

#: Causes that are not a step's name (and :data:`cortex.decision.UNKNOWN_HOSTS`,
#: :data:`cortex.decision.NO_CANDIDATES`).
COMMITMENTS = "commitments"
RESERVATIONS = "reservations"
#: Removed hosts re-checked on the synced view (a refusal is rare; this bounds its cost).
RECHECKED = 8


@dataclass(frozen=True)
class Refusal:
    """The cause of an empty answer and one reason the step gave (None: no step's)."""

    cause: str
    reason: str | None = None

    def __str__(self) -> str:
        """``"<cause>: <reason>"``, or the cause alone."""
        return f"{self.cause}: {self.reason}" if self.reason else self.cause


def refusal_cause(steps: tuple[StepResult, ...] | list[StepResult], offered: int,
                  pipeline: Pipeline | None = None, request: SchedulingRequest | None = None,
                  view: KnowledgeView | None = None,
                  now: datetime | None = None) -> Refusal:
    """The cause of an empty answer whose pipeline ran ``steps`` over ``offered`` candidates.

    With ``pipeline``, ``request`` and the synced ``view`` (not one with reservations
    laid over it), the last step's removed hosts (up to :data:`RECHECKED`) are asked
    again on the synced view: one that passes there was refused for the room laid over
    it (``commitments`` or ``reservations``, see the module). ``now`` (default: the
    clock) decides which commitments are active.
    """
    step = last_removal(steps)
    if step is None:
        return Refusal(UNKNOWN_HOSTS if offered else NO_CANDIDATES)
    if pipeline is not None and request is not None and view is not None:
        overlaid = _overlaid_cause(step.name, list(step.removed), pipeline, request, view,
                                   now or datetime.now(UTC))
        if overlaid is not None:
            return Refusal(overlaid[0], step.removed[overlaid[1]])
    return Refusal(step.name, step.removed[list(step.removed)[-1]])


def _overlaid_cause(name: str, removed: list[str], pipeline: Pipeline,
                    request: SchedulingRequest, view: KnowledgeView,
                    now: datetime) -> tuple[str, str] | None:
    """``(cause, host)`` for a removed host step ``name`` passes on ``view``, if one does.

    Asked: up to :data:`RECHECKED` of the hosts holding other projects' committed
    room, then as many of the others.
    """
    if not isinstance(request, NovaRequest):
        return None
    step = next((s for s in pipeline.filters if s.name == name), None)
    if step is None:
        return None
    committed = {r.host for r in counted_holds(view.commitments, view.hosts,
                                               request.project_id, now)}
    hosts = ([h for h in removed if h in committed][:RECHECKED]
             + [h for h in removed if h not in committed][-RECHECKED:])
    try:
        plugin = step.plugin.bind(request, view)
        for host in hosts:
            state = view.hosts.get(host)
            if state is None or host not in request.candidates.hosts:
                continue
            candidate = request.candidates[request.candidates.hosts.index(host)]
            if plugin.check(state, request, candidate) is None:
                return (COMMITMENTS if host in committed else RESERVATIONS), host
    except Exception:  # noqa: BLE001 - the step's own name is the cause then
        return None
    return None
