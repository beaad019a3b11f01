"""weigher_disk: prefer hosts with more free disk left (spread), or less (stack).

Nova's DiskWeigher (``nova/scheduler/weights/disk.py``): the raw weight is the share of
the node's DISK_GB capacity (``(total - reserved) * allocation_ratio``) still free after
placing the request, 1 for an empty node, 0 for a full one, negative when overcommitted;
the best of the named nodes counts. A positive multiplier spreads instances (Nova's
default ``disk_weight_multiplier = 1.0``), a negative one stacks them. Nova weighs the
absolute free amount normalised over the candidates; Cortex weighs the share, so hosts
of different sizes compare by how full they are. ``measure: free_mb`` weighs Nova's
``free_disk_mb`` instead (``(total - reserved - used) * 1024``, before placement), for a
pipeline that weighs as Nova does. A host without DISK_GB inventory weighs 0.
"""

from __future__ import annotations

from cortex.plugins.measure_options import FreeMbOptions, FreeResourceWeigher
from cortex.plugins.registry import register


@register
class DiskWeigher(FreeResourceWeigher):
    """Free share of DISK_GB after placement."""

    name = "weigher_disk"
    Options = FreeMbOptions
    resource_class = "DISK_GB"
