"""Options shared by filter_network_domain and weigher_network_domain (one meaning, one place)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cortex.request.groups import STRATEGIES
from cortex.rules.network_domains import SCORE_WEIGHTS


@dataclass(frozen=True)
class NetworkDomainOptions:
    """How groups are placed on the fabric.

    ``strategy``: the default when the request's hints name none (``consolidated``,
    ``distributed``, ``balanced``); ``hard``: enforce the strategy's domain for every
    group (otherwise only for ``latency_sensitive`` requests); ``hosts_per_leaf`` and
    ``gpus_per_leaf`` (0: no limit): the domain rule's leaf size; ``score_weights``:
    ``availability``, ``alignment``, ``utilisation``, ``history`` (missing ones keep
    the reference's 0.4 / 0.3 / 0.2 / 0.1).
    """

    strategy: str = "balanced"
    hard: bool = False
    hosts_per_leaf: int = 4
    gpus_per_leaf: int = 0
    score_weights: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}")
        if self.hosts_per_leaf < 1 or self.gpus_per_leaf < 0:
            raise ValueError("hosts_per_leaf must be >= 1 and gpus_per_leaf >= 0")
        unknown = set(self.score_weights) - set(SCORE_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown score weight(s) {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(SCORE_WEIGHTS)})")
