"""weigher_volume_count: prefer Cinder pools holding fewer volumes.

Cinder's VolumeNumberWeigher (``cinder/scheduler/weights/volume_number.py``): the raw
weight is the number of volumes on the pool (the syncers' ``resource_count``), divided
by ``scale`` so that tanh keeps pools apart. As in Cinder
(``volume_number_multiplier = -1.0``), a negative multiplier spreads volumes over
pools, balancing I/O; a positive one packs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import StoragePoolState
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    CinderRequest,
)


@dataclass(frozen=True)
class VolumeCountOptions:
    """``scale``: the volume count that weighs 1 before tanh (> 0)."""

    scale: float = 500.0

    def __post_init__(self) -> None:
        """Reject a non-positive scale."""
        if self.scale <= 0:
            raise ValueError("scale must be > 0")


@register
class VolumeCountWeigher(Weigher[CinderRequest, StoragePoolState]):
    """Volumes on the pool, scaled."""

    name = "weigher_volume_count"
    host_only = True
    services = ("cinder",)
    Options = VolumeCountOptions

    def weigh(self, pool: StoragePoolState, request: CinderRequest, candidate: Candidate) -> float:
        """``resource_count / scale``."""
        return pool.resource_count / self.options.scale
