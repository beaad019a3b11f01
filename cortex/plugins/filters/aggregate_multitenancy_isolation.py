"""filter_aggregate_multitenancy_isolation: tenant-isolated aggregates serve their tenants only.

Nova's AggregateMultiTenancyIsolation
(``nova/scheduler/filters/aggregate_multitenancy_isolation.py``): the project ids in
every ``filter_tenant_id*`` metadata key (``filter_tenant_id``, ``filter_tenant_id1``,
``filter_tenant_id_x``... each a comma-separated list) of all the host's aggregates
together are the only projects the host may serve; a host with no such key serves
every project. Other hosts stay open to the isolated tenants. Not run on rebuild.
Invert: none; drop the step.
"""

from __future__ import annotations

from cortex.plugins.base import Filter
from cortex.plugins.measures import aggregate_metadata
from cortex.plugins.registry import register

KEY_PREFIX = "filter_tenant_id"


@register
class AggregateMultiTenancyIsolationFilter(Filter):
    """Remove hosts isolated for other projects."""

    name = "filter_aggregate_multitenancy_isolation"

    def check(self, host, request, candidate) -> str | None:
        """Reason when the host's aggregates isolate it for other projects."""
        tenants = set().union(*(values for key, values in aggregate_metadata(host).items()
                                if key.startswith(KEY_PREFIX)))
        tenants.discard("")
        if not tenants or request.project_id in tenants:
            return None
        return f"host is isolated for project(s) {', '.join(sorted(tenants)[:3])}"
