"""The options of the weighers that weigh a measure mapped between two bounds.

``weigher_contention``, ``weigher_noisy_projects`` and ``weigher_pool_utilization``
weigh minus a measure (a Prometheus feature of the host or pool, a project's mean CPU
busy share) mapped from ``[lower_bound, upper_bound]`` onto ``[0, 1]`` and clamped
(:func:`cortex.rules.measures.bounded`): values below the lower bound all weigh 0,
values above the upper bound all weigh -1. ``weigher_noisy_projects`` takes
:class:`BoundsOptions`, ``weigher_contention`` :class:`ContentionOptions`, and
``weigher_pool_utilization`` a :class:`FeatureBoundsOptions` of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BoundsOptions:
    """``lower_bound``, ``upper_bound``: the measure's values that map onto 0 and 1."""

    lower_bound: float = 0.5
    upper_bound: float = 0.9


@dataclass(frozen=True)
class FeatureBoundsOptions(BoundsOptions):
    """:class:`BoundsOptions` of a Prometheus ``feature`` (a subclass sets its default)."""

    feature: str = ""


@dataclass(frozen=True)
class ContentionOptions(FeatureBoundsOptions):
    """``weigher_contention``'s: KVM's steal time, 2 % to 10 % (fractions)."""

    lower_bound: float = 0.02
    upper_bound: float = 0.1
    feature: str = "cpu.steal"
