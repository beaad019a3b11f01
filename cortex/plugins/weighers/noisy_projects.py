"""weigher_noisy_projects: keep a noisy project's VMs apart from each other.

The reference implementation's noisy-project anti-affinity: a project whose VMs on
a host are busy on average (mean ``cpu_busy`` of its instances there, from
Prometheus) loads that host heavily, and its next VM should go elsewhere. The raw
weight is minus that mean for the request's project, mapped from ``[lower_bound,
upper_bound]`` (shares, 0.5 and 0.9 by default) onto ``[0, 1]`` and clamped; hosts
where the project has no VM, or only quiet ones, weigh 0. A positive multiplier
spreads noisy projects; a negative one would gather them. Needs the syncers' instance
list.
"""

from __future__ import annotations

from collections.abc import Sequence

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.bounds_options import BoundsOptions
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import bounded


@register
class NoisyProjectsWeigher(Weigher[NovaRequest, HostState]):
    """Minus the bounded mean busyness of the request's project on the host."""

    name = "weigher_noisy_projects"
    Options = BoundsOptions

    def applies(self, request: NovaRequest) -> bool:
        """Only when the request names its project."""
        return bool(request.project_id)

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``-bounded(mean cpu_busy of the project's instances on the host)``."""
        busy = [i.cpu_busy for i in host.instances if i.project_id == request.project_id]
        if not busy:
            return 0.0
        mean = sum(busy) / len(busy)
        return -bounded(mean, self.options.lower_bound, self.options.upper_bound)

    def weigh_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> list[float]:
        """``weigh`` of every host; a host without instances weighs 0 at once."""
        return [self.weigh(s, request, c) if s.instances else 0.0 for c, s in hosts]
