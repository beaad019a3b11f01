"""filter_aggregate_multitenancy_isolation: tenant-isolated aggregates serve their tenants only.

Nova's AggregateMultiTenancyIsolation (:mod:`cortex.rules.aggregate_isolation`): the
project ids in every ``filter_tenant_id*`` metadata key (``filter_tenant_id``,
``filter_tenant_id1``, ``filter_tenant_id_x``... each a comma-separated list) of all
the host's aggregates together are the only projects the host may serve (an empty
value serves none, as in Nova); a host with no such key serves every project. Other
hosts stay open to the isolated tenants. Not run on rebuild. Invert: none; drop the
step.
"""

from __future__ import annotations

from collections.abc import Sequence

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter, host_facts
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)
from cortex.rules.aggregate_isolation import host_metadata, tenant_refusal
from cortex.rules.aggregate_isolation import isolating_tenants as tenants_of


@register
class AggregateMultiTenancyIsolationFilter(Filter[NovaRequest, HostState]):
    """Remove hosts isolated for other projects."""

    name = "filter_aggregate_multitenancy_isolation"

    def memo_key(self, request: NovaRequest) -> str | None:
        """The request's project."""
        return request.project_id

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host's aggregates isolate it for other projects."""
        return tenant_refusal(isolating_tenants(host), request.project_id)

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, with each host's tenants read once per view."""
        tenants = host_facts(view, (self.name, request.service), hosts, isolating_tenants)
        project = request.project_id
        return {c.host: reason for (c, _), t in zip(hosts, tenants, strict=True)
                if (reason := tenant_refusal(t, project)) is not None}


def isolating_tenants(host) -> frozenset[str]:
    """The projects in the host's aggregates' ``filter_tenant_id*`` keys (empty: none)."""
    return tenants_of(host_metadata(host.aggregates))
