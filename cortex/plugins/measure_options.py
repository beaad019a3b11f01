"""The options of the weighers that weigh Nova's measure or Cortex's, and their bases.

:class:`MeasureOptions` chooses between Cortex's measure (:attr:`~MeasureOptions.CORTEX`)
and Nova's (:attr:`~MeasureOptions.NOVA`): the CPU, RAM and disk weighers'
(:class:`FreeVcpusOptions`, :class:`FreeMbOptions`) and the build-failure weigher's
(:class:`BuildFailureOptions`). :class:`FreeResourceWeigher` is the CPU, RAM and disk
weighers' common rule (Nova's resource weighers, ``nova/scheduler/weights/{cpu,ram,
disk}.py``); each names its resource class. :class:`ResourceWeightsOptions` are the
options of the weighers that take a weighted mean over resource classes
(``weigher_binpack``, ``weigher_prefer_smaller_hosts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from cortex.knowledge.view import HostState
from cortex.plugins.base import Weigher
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import free_share, nova_free


@dataclass(frozen=True)
class MeasureOptions:
    """``measure``: Cortex's (:attr:`CORTEX`, the default) or Nova's (:attr:`NOVA`).

    For the capacity weighers Cortex's measure is ``free_share``, what stays free after
    placing the request; Nova's (``free_mb``, ``free_vcpus``) is the amount free before
    it, as Nova's weigher counts it. A subclass whose Cortex measure is another sets
    both :attr:`CORTEX` and the ``measure`` default. A value outside the two is refused.
    """

    measure: str = "free_share"
    CORTEX: ClassVar[str] = "free_share"
    NOVA: ClassVar[str] = ""

    def __post_init__(self) -> None:
        """Refuse a measure outside the two."""
        if self.measure not in (self.CORTEX, self.NOVA):
            raise ValueError(f"measure must be one of {self.CORTEX}, {self.NOVA}")


@dataclass(frozen=True)
class FreeMbOptions(MeasureOptions):
    """:class:`MeasureOptions` of the RAM and disk weighers: Nova's ``free_mb``."""

    NOVA: ClassVar[str] = "free_mb"


@dataclass(frozen=True)
class FreeVcpusOptions(MeasureOptions):
    """:class:`MeasureOptions` of the CPU weigher: Nova's ``free_vcpus``."""

    NOVA: ClassVar[str] = "free_vcpus"


@dataclass(frozen=True)
class BuildFailureOptions(MeasureOptions):
    """:class:`MeasureOptions` of the build-failure weigher: ``minus_failures`` or ``failures``."""

    measure: str = "minus_failures"
    CORTEX: ClassVar[str] = "minus_failures"
    NOVA: ClassVar[str] = "failures"


@dataclass(frozen=True)
class ResourceWeightsOptions:
    """``resource_weights``: resource class -> its weight in the mean (>= 0, not all 0)."""

    resource_weights: dict[str, float] = field(
        default_factory=lambda: {"VCPU": 1.0, "MEMORY_MB": 1.0})

    def __post_init__(self) -> None:
        """Reject negative weights and an all-zero table."""
        if any(w < 0 for w in self.resource_weights.values()) or not any(
                self.resource_weights.values()):
            raise ValueError("resource_weights must be >= 0 and not all 0")


class FreeResourceWeigher(Weigher[NovaRequest, HostState]):
    """What stays free of one resource class on the host's named nodes: set ``resource_class``.

    ``measure: free_share`` (:class:`MeasureOptions`): the share of the class's capacity
    left after placing the request (:func:`cortex.rules.measures.free_share`), of the
    class :meth:`weighed_class` names; Nova's measure: the amount Nova's weigher calls
    free before placement (:func:`cortex.rules.measures.nova_free`) of
    ``resource_class``. The best of the named nodes counts; a host without the
    inventory weighs 0. ``normalize_bounds`` is Nova's resource weighers' ``minval``.
    """

    resource_class: ClassVar[str] = ""
    normalize_bounds = (0.0, None)

    def weighed_class(self, request: NovaRequest) -> str:
        """The resource class whose free share is weighed; default ``resource_class``."""
        return self.resource_class

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """Highest free share (or Nova's free amount) among the named nodes; 0 without."""
        nodes = host.nodes_named(candidate.nodes)
        if self.options.measure == self.options.NOVA:
            found = [nova_free(n, self.resource_class) for n in nodes]
        else:
            weighed = self.weighed_class(request)
            found = [free_share(n, weighed, request) for n in nodes]
        return max((s for s in found if s is not None), default=0.0)
