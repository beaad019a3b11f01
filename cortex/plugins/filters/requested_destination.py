"""filter_requested_destination: honour ``RequestSpec.requested_destination``.

Nova's rules for a requested destination (``nova/scheduler/request_filter.py``,
``nova/scheduler/host_manager.py``): when a ``host`` is given only that host passes;
when a ``node`` is given one of the host's nodes (those the caller named, else all)
must be it; each entry of ``aggregates`` is a comma-joined list of aggregate uuids
of which the host must be in at least one, and every entry must hold (AND across
entries, OR within one); the host must be in none of ``forbidden_aggregates``. Runs
on rebuild (Nova targets the instance's own host there). Invert: none.
"""

from __future__ import annotations

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    NovaRequest,
)


@register
class RequestedDestinationFilter(Filter[NovaRequest, HostState]):
    """Remove hosts outside the requested destination."""

    name = "filter_requested_destination"
    run_on_rebuild = True

    def applies(self, request: NovaRequest) -> bool:
        """Only when the request has a destination with something to check."""
        dest = request.requested_destination
        return bool(dest and (dest.host or dest.node or dest.aggregates
                              or dest.forbidden_aggregates))

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason naming the first unmet part of the destination."""
        dest = request.requested_destination
        if dest is None:
            return None
        if dest.host and dest.host.lower() != host.host.lower():
            return f"requested destination is host {dest.host}"
        if dest.node:
            nodes = {n.lower() for n in (candidate.nodes or tuple(host.nodes))}
            if dest.node.lower() not in nodes:
                return f"requested destination is node {dest.node}"
        mine = {a.uuid for a in host.aggregates}
        for entry in dest.aggregates:
            if not mine.intersection(entry):
                return f"host is in none of the requested aggregates {','.join(entry)}"
        forbidden = mine & dest.forbidden_aggregates
        if forbidden:
            return f"host is in forbidden aggregate {sorted(forbidden)[0]}"
        return None
