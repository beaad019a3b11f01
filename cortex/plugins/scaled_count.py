"""The weighers whose raw weight is one count of the host (or pool) over a scale.

Nova's NumInstancesWeigher and IoOpsWeigher and Cinder's VolumeNumberWeigher each weigh
one count; Cortex divides it by the step's ``scale`` option so that tanh keeps hosts
apart (the count equal to ``scale`` weighs 1 before tanh). A weigher of this kind names
its count (:meth:`ScaledCountWeigher.count`) and its options, a :class:`ScaleOptions`
subclass below that sets the default scale; the sign of the step's multiplier says
whether a high count is sought or avoided.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cortex.plugins.base import RequestT, StateT, Weigher
from cortex.request import Candidate


@dataclass(frozen=True)
class ScaleOptions:
    """``scale``: the count that weighs 1 before tanh (> 0); a subclass sets the default."""

    scale: float = 1.0

    def __post_init__(self) -> None:
        """Reject a non-positive scale."""
        if self.scale <= 0:
            raise ValueError("scale must be > 0")


class ScaledCountWeigher(Weigher[RequestT, StateT]):
    """``count(host) / scale``: implement :meth:`count`.

    The weight reads the host's state and the options alone (``host_only``), so it is
    computed once per host and knowledge view.
    """

    host_only = True
    Options: ClassVar[type] = ScaleOptions

    def count(self, host: StateT) -> float:
        """The host's (or pool's) count that this weigher weighs (a number >= 0)."""
        raise NotImplementedError

    def weigh(self, host: StateT, request: RequestT, candidate: Candidate) -> float:
        """``count(host) / scale``."""
        return self.count(host) / self.options.scale


@dataclass(frozen=True)
class InstanceCountOptions(ScaleOptions):
    """``weigher_instance_count``'s: the instance count that weighs 1 before tanh."""

    scale: float = 50.0


@dataclass(frozen=True)
class IoOpsOptions(ScaleOptions):
    """``weigher_io_ops``'s: the I/O ops count that weighs 1 before tanh."""

    scale: float = 4.0


@dataclass(frozen=True)
class VolumeCountOptions(ScaleOptions):
    """``weigher_volume_count``'s: the volume count that weighs 1 before tanh."""

    scale: float = 500.0
