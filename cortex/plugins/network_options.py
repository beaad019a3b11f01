"""What filter_network_domain and weigher_network_domain share: options and the group plan."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Self

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Plugin
from cortex.request import NovaRequest
from cortex.request.groups import STRATEGIES
from cortex.rules.network_domains import SCORE_WEIGHTS, GroupPlan, plan_group

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class NetworkDomainOptions:
    """How groups are placed on the fabric.

    ``strategy``: the default when the request's hints name none (``consolidated``,
    ``distributed``, ``balanced``); ``hard``: enforce the strategy's domain for every
    group (otherwise only for ``latency_sensitive`` requests); ``hosts_per_leaf`` and
    ``gpus_per_leaf`` (0: no limit): the domain rule's leaf size; ``score_weights``:
    ``availability``, ``alignment``, ``utilization``, ``history`` (missing ones keep
    the reference's 0.4 / 0.3 / 0.2 / 0.1; ``utilisation``, the former spelling, is read
    as ``utilization`` with a warning).
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
        if "utilisation" in self.score_weights:
            LOG.warning("score_weights: 'utilisation' is deprecated: use 'utilization'")
            weights = dict(self.score_weights)
            weights.setdefault("utilization", weights.pop("utilisation"))
            object.__setattr__(self, "score_weights", weights)
        unknown = set(self.score_weights) - set(SCORE_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown score weight(s) {', '.join(sorted(unknown))} "
                             f"(known: {', '.join(SCORE_WEIGHTS)})")


class PlansGroups(Plugin[NovaRequest, HostState]):
    """Mixin of filter_network_domain and weigher_network_domain: the request's GroupPlan.

    ``bind`` plans the group once per request (:func:`plan_group`) and hands a copy of
    the plugin holding it; ``detail`` is the plan's one-line summary for the decision.
    """

    options: NetworkDomainOptions

    def __init__(self, options: NetworkDomainOptions | None = None,
                 plan: GroupPlan | None = None) -> None:
        super().__init__(options)
        self.plan = plan
        self.detail = plan.detail if plan else None

    def applies(self, request: NovaRequest) -> bool:
        """Only for Nova requests and pods that are part of a group or carry network hints."""
        return request.service in ("nova", "kubernetes") and request.network.asks_anything

    def bind(self, request: NovaRequest, view: KnowledgeView) -> Self:
        """A copy of this plugin holding the request's GroupPlan (None: no topology known)."""
        return type(self)(self.options, plan_group(request, view, self.options))
