"""filter_allowed_projects: hosts reserved for some projects serve only those.

A host may be reserved for projects by two sources: the ``allowed_projects`` the
syncers record per host (HostState), and the comma-separated project ids under the
aggregate metadata keys in ``aggregate_keys`` of any of its aggregates. Together they
are the only projects the host serves; a host with neither serves every project.
The same rule as Nova's AggregateMultiTenancyIsolation (``filter_tenant_id``, see
filter_aggregate_multitenancy_isolation), for reservations kept outside Nova's
aggregates. Not run on rebuild. Invert: none; drop the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter, host_facts
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest
from cortex.rules.measures import aggregate_metadata


@dataclass(frozen=True)
class AllowedProjectsOptions:
    """``aggregate_keys``: aggregate metadata keys holding allowed project ids."""

    aggregate_keys: tuple[str, ...] = ("allowed_projects",)


@register
class AllowedProjectsFilter(Filter[NovaRequest, HostState]):
    """Remove hosts reserved for other projects."""

    name = "filter_allowed_projects"
    Options = AllowedProjectsOptions

    def memo_key(self, request: NovaRequest) -> tuple[str | None]:
        """The request's project."""
        return (request.project_id,)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host is reserved and the request's project is not allowed."""
        return _refusal(self.allowed(host), request.project_id)

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, with each host's allowed projects read once per view."""
        key = (self.name, self.options.aggregate_keys, request.service)
        allowed = host_facts(view, key, hosts, self.allowed)
        project = request.project_id
        return {c.host: reason for (c, _), a in zip(hosts, allowed, strict=True)
                if (reason := _refusal(a, project)) is not None}

    def allowed(self, host) -> frozenset[str]:
        """The projects the host is reserved for (empty: every project)."""
        metadata = aggregate_metadata(host)
        allowed = set(host.allowed_projects).union(
            *(metadata.get(k, ()) for k in self.options.aggregate_keys))
        allowed.discard("")
        return frozenset(allowed)


def _refusal(allowed: frozenset[str], project: str | None) -> str | None:
    """The reason when the host is reserved (``allowed``) and ``project`` is not allowed."""
    if not allowed or project in allowed:
        return None
    return f"host is reserved for {len(allowed)} other project(s)"
