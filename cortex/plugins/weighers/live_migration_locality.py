"""weigher_live_migration_locality: a live migration prefers targets close to its source.

Cortex's "prefer hosts close to the source" for Nova live migrations
(``_nova_check_type=live_migrate`` with the ``source_host`` hint): targets in the same
aggregates as the ``source_host`` (the same rack, building block or GPU pool) keep
traffic and failure domains local. The raw weight is the share of the source's
aggregates the target is also in (0..1); availability-zone aggregates do not count
(``ignore_zones``), as every candidate shares the zone. Other requests, and live
migrations from a source unknown to Cortex, are not weighed. A positive multiplier keeps
migrations local; a negative one sends them away.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Weigher
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import source_host


@dataclass(frozen=True)
class LiveMigrationLocalityOptions:
    """``ignore_zones``: leave availability-zone aggregates out."""

    ignore_zones: bool = True


@register
class LiveMigrationLocalityWeigher(Weigher[NovaRequest, HostState]):
    """Share of the source's aggregates the target shares."""

    name = "weigher_live_migration_locality"
    Options = LiveMigrationLocalityOptions
    source_aggregates: frozenset[str] = frozenset()

    def applies(self, request: NovaRequest) -> bool:
        """Only for live migrations that name their source host."""
        return request.intent == "live_migrate" and source_host(request) is not None

    def bind(self, request: NovaRequest, view: KnowledgeView) -> LiveMigrationLocalityWeigher:
        """A copy holding the source's aggregate uuids (empty when the source is unknown)."""
        bound = LiveMigrationLocalityWeigher(self.options)
        source = view.hosts.get(source_host(request) or "")
        if source is not None:
            bound.source_aggregates = self._aggregates(source)
        return bound

    def weigh(self, host: HostState, request: NovaRequest, candidate: Candidate) -> float:
        """``|shared| / |source's|``, 0 when the source has none."""
        if not self.source_aggregates:
            return 0.0
        shared = self._aggregates(host) & self.source_aggregates
        return len(shared) / len(self.source_aggregates)

    def _aggregates(self, host) -> frozenset[str]:
        """Uuids of the host's aggregates (zones left out if so configured)."""
        return frozenset(a.uuid for a in host.aggregates
                         if not (self.options.ignore_zones and a.availability_zone))
