"""weigher_ram: prefer hosts with more free RAM left (spread), or less (stack).

Nova's RAMWeigher (``nova/scheduler/weights/ram.py``): the raw weight is the share of
the node's MEMORY_MB capacity (``(total - reserved) * allocation_ratio``) still free
after placing the request, 1 for an empty node, 0 for a full one, negative when
overcommitted; the best of the named nodes counts. A positive multiplier spreads
instances (Nova's default ``ram_weight_multiplier = 1.0``), a negative one stacks them.
Nova weighs the absolute free amount normalised over the candidates; Cortex weighs the
share, so hosts of different sizes compare by how full they are. ``measure: free_mb``
weighs Nova's ``free_ram_mb`` instead (``total - reserved - used``, before placement),
for a pipeline that weighs as Nova does (``nova-baseline``). A host without MEMORY_MB
inventory weighs 0.
"""

from __future__ import annotations

from cortex.plugins.measure_options import FreeMbOptions, FreeResourceWeigher
from cortex.plugins.registry import register


@register
class RAMWeigher(FreeResourceWeigher):
    """Free share of MEMORY_MB after placement."""

    name = "weigher_ram"
    Options = FreeMbOptions
    resource_class = "MEMORY_MB"
