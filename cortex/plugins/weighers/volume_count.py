"""weigher_volume_count: prefer Cinder pools holding fewer volumes.

Cinder's VolumeNumberWeigher (``cinder/scheduler/weights/volume_number.py``): the raw
weight is the number of volumes on the pool (the syncers' ``resource_count``), divided
by ``scale`` so that tanh keeps pools apart. As in Cinder
(``volume_number_multiplier = -1.0``), a negative multiplier spreads volumes over
pools, balancing I/O; a positive one packs them.
"""

from __future__ import annotations

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.registry import register
from cortex.plugins.scaled_count import ScaledCountWeigher, VolumeCountOptions
from cortex.request import CinderRequest


@register
class VolumeCountWeigher(ScaledCountWeigher[CinderRequest, StoragePoolState]):
    """Volumes on the pool, scaled."""

    name = "weigher_volume_count"
    services = ("cinder",)
    Options = VolumeCountOptions

    def count(self, pool: StoragePoolState) -> float:
        """``resource_count``."""
        return pool.resource_count
