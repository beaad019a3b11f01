"""weigher_build_failures: avoid hosts where builds failed recently.

Nova's BuildFailureWeigher (``nova/scheduler/weights/compute.py``): the raw weight is
minus the host's count of recent build failures (``failed_builds``, reset by nova-compute
after a successful build). Nova's default ``build_failure_weight_multiplier`` is
1000000.0, large enough to override the other weighers; with Cortex's tanh squashing a
multiplier of a few units does the same. A negative multiplier would prefer failing
hosts: do not. ``measure: failures`` weighs ``failed_builds`` itself, for a pipeline that
weighs as Nova does with Nova's negated multiplier (``-1000000.0``, ``nova-baseline``).
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.measure_options import BuildFailureOptions
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class BuildFailureWeigher(Weigher[NovaRequest, HostState]):
    """Minus the recent build failures on the host."""

    name = "weigher_build_failures"
    host_only = True
    Options = BuildFailureOptions

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-failed_builds`` (``failures``: ``failed_builds``)."""
        failures = float(host.failed_builds)
        return failures if self.options.measure == "failures" else -failures
