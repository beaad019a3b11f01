"""weigher_instance_count: prefer hosts with fewer (or more) instances.

Nova's NumInstancesWeigher (``nova/scheduler/weights/num_instances.py``): the raw
weight is the number of instances on the host, divided by ``scale`` so that tanh keeps
hosts apart. A negative multiplier spreads instances over hosts; a positive one packs
them (Nova's default multiplier is 0, off). Needs the syncers' instance list; without
it every host weighs 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)


@dataclass(frozen=True)
class InstanceCountOptions:
    """``scale``: the instance count that weighs 1 before tanh (> 0)."""

    scale: float = 50.0

    def __post_init__(self) -> None:
        """Reject a non-positive scale."""
        if self.scale <= 0:
            raise ValueError("scale must be > 0")


@register
class InstanceCountWeigher(Weigher[NovaRequest, HostState]):
    """Instances on the host, scaled."""

    name = "weigher_instance_count"
    host_only = True
    Options = InstanceCountOptions

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``len(instances) / scale``."""
        return len(host.instances) / self.options.scale
