"""weigher_metrics: a weighted sum of named Prometheus features of the host.

Nova's MetricsWeigher (``nova/scheduler/weights/metrics.py``, ``[metrics]
weight_setting = name=ratio, ...``): the raw weight is ``sum(ratio * feature)`` over
``metrics`` (e.g. ``{"cpu.busy": -1.0}`` prefers idle hosts), the features being the
syncers' Prometheus features of the host (HostState.features). When a host lacks one
of them it weighs ``weight_of_unavailable`` or, with ``required``, the step fails (and
is skipped or answers 503 by its ``on_error``), as Nova raises. Invert: negative
multiplier, or negative ratios.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


class MetricUnavailable(LookupError):
    """A required metric is missing on a host."""


@dataclass(frozen=True)
class MetricsOptions:
    """``metrics``: feature name -> ratio; what a host without one of them weighs."""

    metrics: dict[str, float] = field(default_factory=dict)
    weight_of_unavailable: float = -1.0
    required: bool = False


@register
class MetricsWeigher(Weigher[NovaRequest, HostState]):
    """``sum(ratio * feature)`` over the configured metrics."""

    name = "weigher_metrics"
    host_only = True
    Options = MetricsOptions

    def applies(self, request: NovaRequest) -> bool:
        """Only when metrics are configured."""
        return bool(self.options.metrics)

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """The weighted sum; ``weight_of_unavailable`` (or an error) when one is missing."""
        missing = [m for m in self.options.metrics if m not in host.features]
        if missing and self.options.required:
            raise MetricUnavailable(f"{host.host} has no metric {missing[0]}")
        if missing:
            return self.options.weight_of_unavailable
        return sum(ratio * float(host.features[m]) for m, ratio in self.options.metrics.items())
