"""weigher_contention: avoid hosts whose CPUs are contended (steal time, CPU ready).

Like the reference implementation's weighers avoiding CPU-contended VMware hosts, for
any contention feature (KVM's steal time by default): the raw weight is minus the host's
Prometheus ``feature`` (default ``cpu.steal``, the share of time vCPUs waited for a
physical CPU; ``cpu.contention`` on VMware) mapped from ``[lower_bound, upper_bound]``
onto ``[0, 1]`` and clamped, so that hosts below the lower bound are all equal and hosts
above the upper bound all avoided. A positive multiplier avoids contended hosts; a
negative one would seek them. Hosts without the feature weigh 0.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.bounds_options import ContentionOptions
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import bounded, feature


@register
class ContentionWeigher(Weigher[NovaRequest, HostState]):
    """Minus the bounded contention of the host."""

    name = "weigher_contention"
    host_only = True
    Options = ContentionOptions

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-bounded(feature)`` in ``[-1, 0]``."""
        value = feature(host.features, self.options.feature)
        return -bounded(value, self.options.lower_bound, self.options.upper_bound)
