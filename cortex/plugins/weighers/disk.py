"""weigher_disk: prefer hosts with more free disk left (spread), or less (stack).

Nova's DiskWeigher (``nova/scheduler/weights/disk.py``): the raw weight is the share of
the node's DISK_GB capacity (``(total - reserved) * allocation_ratio``) still free after
placing the request, 1 for an empty node, 0 for a full one, negative when overcommitted;
the best of the named nodes counts. A positive multiplier spreads instances (Nova's
default ``disk_weight_multiplier = 1.0``), a negative one stacks them. Nova weighs the
absolute free amount normalised over the candidates; Cortex weighs the share, so hosts
of different sizes compare by how full they are. A host without DISK_GB inventory weighs
0.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.measures import free_share


@register
class DiskWeigher(Weigher[NovaRequest, HostState]):
    """Free share of DISK_GB after placement."""

    name = "weigher_disk"

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """Highest free share among the named nodes (0 without inventory)."""
        nodes = host.nodes_named(candidate.nodes)
        shares = [free_share(n, "DISK_GB", request) for n in nodes]
        return max((s for s in shares if s is not None), default=0.0)
