"""weigher_hypervisor_version: prefer hosts with a newer hypervisor.

Nova's HypervisorVersionWeigher (``nova/scheduler/weights/hypervisor_version.py``,
``[filter_scheduler] hypervisor_version_weight_multiplier``, 1.0 by default since
2024.1): the raw weight is the node's hypervisor version, Nova's integer (``major *
10**6 + minor * 10**3 + micro``), 0 when unknown; the highest of the named nodes counts.
Under Cortex's tanh squashing versions of millions all weigh 1: the weigher is meant for
pipelines that weigh as Nova does (``weighing: nova``, ``nova-baseline``), which
normalise it over the candidates. Invert: a negative multiplier prefers older hosts.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class HypervisorVersionWeigher(Weigher[NovaRequest, HostState]):
    """The hypervisor version of the host's named node."""

    name = "weigher_hypervisor_version"

    def memo_key(self, request: NovaRequest) -> tuple:
        """``()``: the weight reads the host's named nodes alone."""
        return ()

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """The highest version among the named nodes (0 when unknown)."""
        return float(max((n.hypervisor_version or 0 for n in host.nodes_named(candidate.nodes)),
                         default=0))
