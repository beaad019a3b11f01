"""weigher_instance_count: prefer hosts with fewer (or more) instances.

Nova's NumInstancesWeigher (``nova/scheduler/weights/num_instances.py``): the raw
weight is the number of instances on the host, divided by ``scale`` so that tanh keeps
hosts apart. A negative multiplier spreads instances over hosts; a positive one packs
them (Nova's default multiplier is 0, off). Needs the syncers' instance list; without
it every host weighs 0.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.scaled_count import InstanceCountOptions, ScaledCountWeigher
from cortex.request import NovaRequest


@register
class InstanceCountWeigher(ScaledCountWeigher[NovaRequest, HostState]):
    """Instances on the host, scaled."""

    name = "weigher_instance_count"
    Options = InstanceCountOptions

    def count(self, host: HostState) -> float:
        """``len(instances)``."""
        return len(host.instances)
