"""Run a pipeline over the caller's candidates: filters, then weighers, then the order.

The final weight of a judged host is :func:`cortex.decision.final_weights`'s
``tanh(caller weight) + sum(multiplier * tanh(raw weight))``; with no weighers that
ran, the caller's order by weight passes through unchanged.
Ties break deterministically: higher caller weight first, then the caller's order.
Hosts the knowledge view does not know follow the unknown-host policy: ``keep``
appends them after the judged hosts, by caller weight; ``drop`` removes them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cortex.decision import HostWeights, StepResult, final_weight_array
from cortex.knowledge.view import KnowledgeView
from cortex.pipeline import memo
from cortex.pipeline.config import Pipeline, Step
from cortex.plugins.base import Filter, Weigher
from cortex.request import Candidate, SchedulingRequest

LOG = logging.getLogger(__name__)


class StepFailed(RuntimeError):
    """A fail-closed step raised: the request gets 503 so the caller keeps its order."""

    def __init__(self, step: str, error: BaseException) -> None:
        super().__init__(f"step {step} failed: {type(error).__name__}: {error}")
        self.step = step


class BudgetExceeded(StepFailed):
    """The request's time budget ran out before ``step``: 503, the caller keeps its order."""

    def __init__(self, step: str, spent_ms: float) -> None:
        RuntimeError.__init__(self, f"time budget exceeded after {spent_ms:.0f} ms, "
                                    f"before step {step}")
        self.step = step


class StepTooSlow(TimeoutError):
    """A step ran longer than its ``max_duration_ms``."""


@dataclass
class PipelineResult:
    """The answer (``hosts``, best first) and how it came about.

    ``weights`` are the final weights of the judged hosts (read-only columns);
    ``weighed`` lists those hosts in the order the weighers saw them (every weigher
    step's ``values`` order);
    ``weighing`` is the pipeline's (:data:`cortex.decision.WEIGHINGS`).
    """

    pipeline: str
    hosts: list[str]
    steps: list[StepResult]
    unknown_hosts: list[str]
    weights: HostWeights
    weighed: list[str] = field(default_factory=list)
    weighing: str = "cortex"


def run_pipeline(pipeline: Pipeline, request: SchedulingRequest, view: KnowledgeView,
                 unknown_policy: str = "keep", deadline: float | None = None,
                 memo_limit: int = memo.DEFAULT_LIMIT,
                 memo_dropped: Callable[[int], None] | None = None) -> PipelineResult:
    """Filter and weigh ``request.candidates`` against ``view``.

    ``deadline`` is a ``time.perf_counter()`` value: no step starts after it
    (BudgetExceeded). Raises StepFailed for a fail-closed step that raised or ran too long.
    ``memo_limit``: host answers the steps may keep per knowledge version
    (:mod:`cortex.pipeline.memo`; 0 keeps none); ``memo_dropped(answers)`` is told of
    each drop of kept answers past that limit.
    """
    started = time.perf_counter()
    candidates = request.candidates
    judged = memo.candidates_of(candidates, view, request.service)
    caller = np.array(candidates.weights, dtype=float)
    unknown: list[Candidate] = []
    if judged.at is not None:
        known = np.zeros(len(candidates), bool)
        known[judged.at] = True
        unknown = list(candidates.take(np.flatnonzero(~known).tolist()))
        caller = caller[known]
    answers = memo.store_of(view, memo_limit, memo_dropped) if memo_limit else None
    run = _Run(request, view, judged, answers, pipeline.weighing)
    rows = np.arange(len(judged.names))
    steps = []
    for filter_step in pipeline.filters:
        _check_budget(filter_step, deadline, started)
        record, rows = _run_filter(filter_step, run, rows)
        steps.append(record)
    names = run.names_of(rows)
    weighers, tanh = [], []
    for weigher_step in pipeline.weighers:
        _check_budget(weigher_step, deadline, started)
        record, taken = _run_weigher(weigher_step, run, rows, names)
        steps.append(record)
        if record.weighs:
            weighers.append(record)
            tanh.append(taken)
    weights = caller[rows]
    sums = final_weight_array(weights, weighers, pipeline.weighing, tanh)
    final = HostWeights(names, sums.tolist())
    # by final weight, then caller weight, both highest first; lexsort is stable and
    # the rows are in the caller's order, so equal keys keep it
    hosts = list(map(names.__getitem__, np.lexsort((-weights, -sums)).tolist()))
    if (pipeline.unknown_hosts or unknown_policy) == "keep":
        hosts += [c.host for c in sorted(unknown, key=lambda c: -c.weight)]  # stable
    return PipelineResult(pipeline.name, hosts, steps, [c.host for c in unknown], final,
                          names, pipeline.weighing)


@dataclass(slots=True)
class _Run:
    """What every step of one call shares.

    The request, its view, the candidates the view knows as columns
    (:class:`memo.Candidates`), the view's answer store (None: nothing memoised) and the
    pipeline's weighing. A step judges ``rows``: the ascending positions of the hosts
    still alive among ``judged.names``; the names of the last rows asked for are kept
    while the rows are the same array (the pairs are made when a plugin reads them).
    """

    request: SchedulingRequest
    view: KnowledgeView
    judged: memo.Candidates
    answers: memo.AnswerStore | None
    weighing: str = "cortex"
    _names: tuple[np.ndarray, list[str]] | None = None

    def pairs_of(self, rows: np.ndarray) -> memo.JudgedPairs:
        """The ``(candidate, state)`` pairs of ``rows``, in their order (made when read)."""
        return self.judged.pairs_of(rows.tolist())

    def names_of(self, rows: np.ndarray) -> list[str]:
        """The host names of ``rows``, in their order."""
        if self._names is None or self._names[0] is not rows:
            self._names = (rows, list(map(self.judged.names.__getitem__, rows.tolist())))
        return self._names[1]

    def table(self, plugin: Any, weighs: bool = False) -> memo.AnswerTable | None:
        """The bound ``plugin``'s answer table for this request; None: ask it every time."""
        if self.answers is None:
            return None
        key = plugin.memo_key(self.request)
        if key is None:
            return None
        return self.answers.table((plugin.memo_identity, self.request.service, key),
                                  len(memo.host_index(self.view, self.request.service)),
                                  weighs)


def _check_budget(step: Step[Any], deadline: float | None, started: float) -> None:
    """Raise BudgetExceeded when the request's deadline has passed."""
    now = time.perf_counter()
    if deadline is not None and now > deadline:
        raise BudgetExceeded(step.name, (now - started) * 1000)


def _check_duration(step: Step[Any], duration_ms: float) -> None:
    """Raise StepTooSlow when ``step`` ran past its ``max_duration_ms``."""
    if step.max_duration_ms is not None and duration_ms > step.max_duration_ms:
        raise StepTooSlow(f"ran {duration_ms:.1f} ms, limit {step.max_duration_ms:g} ms")


def skip_reason(step: Step[Any], request: SchedulingRequest) -> str | None:
    """Why ``step`` does not run for ``request`` (None: it runs).

    Nova's ``RUN_ON_REBUILD``: most filters do not re-check a rebuild's own host; a
    plugin's ``applies`` may leave out requests it has nothing to say about.
    """
    if step.kind == "filter" and request.service == "nova" and request.intent == "rebuild" \
            and not step.plugin.run_on_rebuild:
        return "not run on rebuild"
    if not step.plugin.applies(request):
        return "not applicable to this request"
    return None


def refusal(pipeline: Pipeline, request: SchedulingRequest, view: KnowledgeView,
            host: str) -> str | None:
    """The first non-shadow filter of ``pipeline`` that removes ``host`` in ``view``, and why.

    ``"<step>: <reason>"``, or None when every filter passes it. A filter that raises
    counts as a refusal. The in-flight reservation's re-check of one host
    (:mod:`cortex.scheduler.promise`).
    """
    candidate = request.candidates[request.candidates.hosts.index(host)]
    state = view.hosts[host]
    for step in pipeline.filters:
        if step.shadow or skip_reason(step, request):
            continue
        try:
            reason = step.plugin.bind(request, view).check(state, request, candidate)
        except Exception as exc:  # noqa: BLE001 - a plugin bug must not escape as a 500
            reason = f"{type(exc).__name__}: {exc}"
        if reason is not None:
            return f"{step.name}: {reason}"
    return None


def _run_filter(step: Step[Filter], run: _Run, rows: np.ndarray
                ) -> tuple[StepResult, np.ndarray]:
    """Apply one filter to ``rows``; return its result and the rows still alive."""
    request, view = run.request, run.view
    skipped = skip_reason(step, request)
    if skipped:
        return StepResult(step.name, "filter", "skipped", reason=skipped, shadow=step.shadow,
                          hosts_in=len(rows)), rows
    started = time.perf_counter()
    detail = None
    failing = None
    try:
        plugin = step.plugin.bind(request, view)
        detail = plugin.detail
        table = run.table(plugin)
        if table is None:
            removed = plugin.check_all(run.pairs_of(rows), request, view)
        else:
            removed, failing = memo.check_memoised(
                table, run.judged, rows, lambda hosts: plugin.check_all(hosts, request, view))
        _check_duration(step, (time.perf_counter() - started) * 1000)
    except Exception as exc:  # noqa: BLE001 - a plugin bug must not escape as a 500
        if step.on_error == "fail":
            raise StepFailed(step.name, exc) from exc
        LOG.warning("filter %s failed, skipped by policy: %r", step.name, exc)
        return StepResult(step.name, "filter", "error", _ms(started), repr(exc), step.shadow,
                          hosts_in=len(rows), detail=detail), rows
    result = StepResult(step.name, "filter", "ran", _ms(started), shadow=step.shadow,
                        hosts_in=len(rows), removed=removed, detail=detail)
    if step.shadow or not removed:
        return result, rows
    if failing is None:
        failing = np.fromiter(map(removed.__contains__, run.names_of(rows)), bool, len(rows))
    return result, rows[~failing]


def _run_weigher(step: Step[Weigher], run: _Run, rows: np.ndarray, judged: list[str]
                 ) -> tuple[StepResult, np.ndarray | None]:
    """Apply one weigher: its raw weight per host of ``rows``, in the order of ``judged``.

    All or nothing: a weigher that fails gives no values (skipped by its policy). With
    the result, ``math.tanh`` of the values where its answers were kept (else None).
    """
    request, view = run.request, run.view
    skipped = skip_reason(step, request)
    if skipped:
        return StepResult(step.name, "weigher", "skipped", reason=skipped,
                          multiplier=step.multiplier, hosts_in=len(rows)), None
    started = time.perf_counter()
    detail = tanh = None
    try:
        plugin = step.plugin.bind(request, view)
        detail = plugin.detail
        table = run.table(plugin, weighs=True)
        if table is None:
            weights = list(plugin.weigh_all(run.pairs_of(rows), request, view))
            finite = all(map(math.isfinite, weights))
        else:
            values, tanh = memo.weigh_memoised(
                table, run.judged, rows, lambda hosts: plugin.weigh_all(hosts, request, view))
            weights, finite = values.tolist(), bool(np.isfinite(values).all())
        if len(weights) != len(rows):
            raise ValueError(f"{len(weights)} weights for {len(rows)} hosts")
        if not finite:
            raw, host = next((w, h) for w, h in zip(weights, judged, strict=True)
                             if not math.isfinite(w))
            raise ValueError(f"weight {raw} for {host} is not finite")
        _check_duration(step, (time.perf_counter() - started) * 1000)
    except Exception as exc:  # noqa: BLE001 - a plugin bug must not escape as a 500
        if step.on_error == "fail":
            raise StepFailed(step.name, exc) from exc
        LOG.warning("weigher %s failed, skipped by policy: %r", step.name, exc)
        return StepResult(step.name, "weigher", "error", _ms(started), repr(exc),
                          multiplier=step.multiplier, hosts_in=len(rows), detail=detail), None
    return StepResult(step.name, "weigher", "ran", _ms(started), multiplier=step.multiplier,
                      hosts_in=len(rows), detail=detail, weighed=judged, values=weights,
                      normalize=plugin.normalize_bounds if run.weighing == "nova" else None
                      ), tanh


def _ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` value)."""
    return (time.perf_counter() - started) * 1000
