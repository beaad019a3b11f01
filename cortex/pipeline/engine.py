"""Run a pipeline over the caller's candidates: filters, then weighers, then the order.

Combination, compatible with the reference implementation::

    final(host) = tanh(caller_weight) + sum(multiplier * tanh(raw_weight))

With no weighers that ran, the caller's order by weight passes through unchanged.
Ties break deterministically: higher caller weight first, then the caller's order.
Hosts the knowledge view does not know follow the unknown-host policy: ``keep``
appends them after the judged hosts, by caller weight; ``drop`` removes them.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from cortex.knowledge.view import KnowledgeView
from cortex.pipeline.config import Pipeline, Step

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
class StepRecord:
    """What one step did: ``status`` ran|skipped|error; per-host details.

    Filters: ``removed`` maps host -> reason (``shadow`` steps fill it without
    removing). Weighers: ``values``, the raw weight of each host of ``weighed`` in its
    order (``weighed`` is the judged host list the engine shares with every weigher of
    the call); :attr:`raw` and :attr:`scaled` (``multiplier * tanh(raw)``) give them per
    host. ``detail``: what the bound plugin decided for the whole request (Plugin.detail).
    """

    name: str
    kind: str
    status: str
    duration_ms: float = 0.0
    reason: str | None = None
    shadow: bool = False
    multiplier: float | None = None
    hosts_in: int = 0
    removed: dict[str, str] = field(default_factory=dict)
    detail: str | None = None
    weighed: list[str] | None = field(default=None, repr=False)
    values: list[float] | None = None

    @property
    def raw(self) -> dict[str, float]:
        """``{host: raw weight}`` of a weigher that ran; ``{}`` otherwise."""
        if not self.values:
            return {}
        return dict(zip(self.weighed or (), self.values, strict=True))

    @property
    def scaled(self) -> dict[str, float]:
        """``{host: multiplier * tanh(raw)}``: this step's term of each final weight."""
        if not self.values:
            return {}
        multiplier, tanh = self.multiplier, math.tanh
        return {host: multiplier * tanh(value)
                for host, value in zip(self.weighed or (), self.values, strict=True)}

    def _fields(self) -> dict[str, Any]:
        """The shared fields of both forms, empty details left out."""
        fields = {"name": self.name, "kind": self.kind, "status": self.status,
                  "duration_ms": self.duration_ms, "reason": self.reason,
                  "shadow": self.shadow, "multiplier": self.multiplier,
                  "hosts_in": self.hosts_in, "removed": self.removed, "detail": self.detail}
        return {k: v for k, v in fields.items() if v not in ({}, None)}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form with ``raw`` and ``scaled`` per host, empty details left out."""
        document = self._fields()
        if self.values:
            document.update(raw=self.raw, scaled=self.scaled)
        return document

    def as_stored(self) -> dict[str, Any]:
        """The form decision records keep: ``raw`` a list in ``weighed`` order, no ``scaled``.

        :func:`cortex.store.decisions.expand_record` turns it back into :meth:`as_dict`.
        """
        document = self._fields()
        if self.values:
            document["raw"] = self.values
        return document


@dataclass
class PipelineResult:
    """The answer (``hosts``, best first) and how it came about.

    ``weights`` are the final weights of the judged hosts; ``weighed`` lists those
    hosts in the order the weighers saw them (every weigher step's ``values`` order).
    """

    pipeline: str
    hosts: list[str]
    steps: list[StepRecord]
    unknown_hosts: list[str]
    weights: dict[str, float]
    weighed: list[str] = field(default_factory=list)


def run_pipeline(pipeline: Pipeline, request: Any, view: KnowledgeView,
                 unknown_policy: str = "keep", deadline: float | None = None) -> PipelineResult:
    """Filter and weigh ``request.candidates`` against ``view``.

    ``deadline`` is a ``time.perf_counter()`` value: no step starts after it
    (BudgetExceeded). Raises StepFailed for a fail-closed step that raised or ran too long.
    """
    started = time.perf_counter()
    states = view.states_for(request.service)
    order = {c.host: i for i, c in enumerate(request.candidates)}
    alive = [(c, states[c.host]) for c in request.candidates if c.host in states]
    unknown = [c for c in request.candidates if c.host not in states]
    steps = []
    for step in pipeline.filters:
        _check_budget(step, deadline, started)
        record, alive = _run_filter(step, request, alive, view)
        steps.append(record)
    judged = [c.host for c, _ in alive]
    sums = [math.tanh(c.weight) for c, _ in alive]  # in the order of ``judged``
    for step in pipeline.weighers:
        _check_budget(step, deadline, started)
        record, scaled = _run_weigher(step, request, alive, judged, view)
        steps.append(record)
        if scaled is not None:
            sums = [total + value for total, value in zip(sums, scaled, strict=True)]
    final = dict(zip(judged, sums, strict=True))
    alive.sort(key=lambda cs: (-final[cs[0].host], -cs[0].weight, order[cs[0].host]))
    hosts = [c.host for c, _ in alive]
    if (pipeline.unknown_hosts or unknown_policy) == "keep":
        hosts += [c.host for c in sorted(unknown, key=lambda c: (-c.weight, order[c.host]))]
    return PipelineResult(pipeline.name, hosts, steps, [c.host for c in unknown], final,
                          judged)


def _check_budget(step: Step, deadline: float | None, started: float) -> None:
    """Raise BudgetExceeded when the request's deadline has passed."""
    now = time.perf_counter()
    if deadline is not None and now > deadline:
        raise BudgetExceeded(step.name, (now - started) * 1000)


def _check_duration(step: Step, duration_ms: float) -> None:
    """Raise StepTooSlow when ``step`` ran past its ``max_duration_ms``."""
    if step.max_duration_ms is not None and duration_ms > step.max_duration_ms:
        raise StepTooSlow(f"ran {duration_ms:.1f} ms, limit {step.max_duration_ms:g} ms")


def _skip_reason(step: Step, request: Any) -> str | None:
    """Why ``step`` does not run for ``request`` (None: it runs)."""
    if step.kind == "filter" and request.service == "nova" and request.intent == "rebuild" \
            and not step.plugin.run_on_rebuild:
        return "not run on rebuild"
    if not step.plugin.applies(request):
        return "not applicable to this request"
    return None


def _run_filter(step: Step, request: Any, alive: list,
                view: KnowledgeView) -> tuple[StepRecord, list]:
    """Apply one filter; return its record and the hosts still alive."""
    record = StepRecord(step.name, "filter", "ran", shadow=step.shadow, hosts_in=len(alive))
    record.reason = _skip_reason(step, request)
    if record.reason:
        record.status = "skipped"
        return record, alive
    started = time.perf_counter()
    try:
        plugin = step.plugin.bind(request, view)
        record.detail = plugin.detail
        record.removed = plugin.check_all(alive, request, view)
        _check_duration(step, (time.perf_counter() - started) * 1000)
    except Exception as exc:  # noqa: BLE001 - a plugin bug must not escape as a 500
        record.duration_ms = (time.perf_counter() - started) * 1000
        if step.on_error == "fail":
            raise StepFailed(step.name, exc) from exc
        LOG.warning("filter %s failed, skipped by policy: %r", step.name, exc)
        record.status, record.reason, record.removed = "error", repr(exc), {}
        return record, alive
    record.duration_ms = (time.perf_counter() - started) * 1000
    if step.shadow or not record.removed:
        return record, alive
    return record, [(c, s) for c, s in alive if c.host not in record.removed]


def _run_weigher(step: Step, request: Any, alive: list, judged: list[str],
                 view: KnowledgeView) -> tuple[StepRecord, list[float] | None]:
    """Apply one weigher: its record and ``multiplier * tanh(raw)`` per host of ``alive``.

    ``judged`` holds the host names of ``alive``, in its order. The values come as a
    list in that order, or None when the step was skipped or failed (all or nothing).
    """
    record = StepRecord(step.name, "weigher", "ran", multiplier=step.multiplier,
                        hosts_in=len(alive))
    record.reason = _skip_reason(step, request)
    if record.reason:
        record.status = "skipped"
        return record, None
    started = time.perf_counter()
    try:
        plugin = step.plugin.bind(request, view)
        record.detail = plugin.detail
        weights = plugin.weigh_all(alive, request, view)
        if len(weights) != len(alive):
            raise ValueError(f"{len(weights)} weights for {len(alive)} hosts")
        if not all(map(math.isfinite, weights)):
            raw, host = next((w, c.host) for w, (c, _) in zip(weights, alive, strict=True)
                             if not math.isfinite(w))
            raise ValueError(f"weight {raw} for {host} is not finite")
        _check_duration(step, (time.perf_counter() - started) * 1000)
    except Exception as exc:  # noqa: BLE001 - a plugin bug must not escape as a 500
        record.duration_ms = (time.perf_counter() - started) * 1000
        if step.on_error == "fail":
            raise StepFailed(step.name, exc) from exc
        LOG.warning("weigher %s failed, skipped by policy: %r", step.name, exc)
        record.status, record.reason = "error", repr(exc)
        return record, None
    record.weighed, record.values = judged, list(weights)
    multiplier, tanh = step.multiplier, math.tanh
    scaled = [multiplier * tanh(raw) for raw in weights]
    record.duration_ms = (time.perf_counter() - started) * 1000
    return record, scaled
