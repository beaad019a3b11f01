"""weigher_io_ops: prefer hosts with fewer instances in I/O-heavy operations.

Nova's IoOpsWeigher (``nova/scheduler/weights/io_ops.py``): the raw weight is the
host's ``num_io_ops`` — instances building or resizing, rebuilding, snapshotting,
backing up, rescuing or unshelving (Nova's ``io_workload``) — divided by ``scale`` so
that tanh keeps hosts apart. As in Nova (``io_ops_weight_multiplier = -1.0``), a
negative multiplier prefers quiet hosts; a positive one prefers busy ones. Needs the
syncers' instance list; without it every host weighs 0.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.registry import register
from cortex.plugins.scaled_count import IoOpsOptions, ScaledCountWeigher
from cortex.request import NovaRequest
from cortex.rules.measures import num_io_ops


@register
class IoOpsWeigher(ScaledCountWeigher[NovaRequest, HostState]):
    """Instances in I/O-heavy operations on the host, scaled."""

    name = "weigher_io_ops"
    Options = IoOpsOptions
    normalize_bounds = (0.0, None)  # Nova's IoOpsWeigher.minval

    def count(self, host: HostState) -> float:
        """``num_io_ops``."""
        return num_io_ops(host)
