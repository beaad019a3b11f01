"""filter_host_instructions: honour ``ignore_hosts``, ``force_hosts`` and ``force_nodes``.

Nova's HostManager rules (``nova/scheduler/host_manager.py``,
``_strip_ignore_hosts``/``_match_forced_hosts``/``_match_forced_nodes``): ignored
hosts are removed; when hosts or nodes are forced, only those stay. Host names compare
case-insensitively and node names exactly, as Nova does. Runs on rebuild too (the
instructions still hold).
Invert: none; these are the caller's instructions.
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
class HostInstructionsFilter(Filter[NovaRequest, HostState]):
    """Remove ignored hosts; keep only forced hosts/nodes when any are forced."""

    name = "filter_host_instructions"
    run_on_rebuild = True

    def applies(self, request: NovaRequest) -> bool:
        """Only when the request names hosts or nodes."""
        return bool(request.ignore_hosts or request.force_hosts or request.force_nodes)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host is ignored or not among the forced ones."""
        name = candidate.host.lower()
        if name in {h.lower() for h in request.ignore_hosts}:
            return "host is in ignore_hosts"
        if request.force_hosts and name not in {h.lower() for h in request.force_hosts}:
            return "host is not in force_hosts"
        if request.force_nodes:  # node names compare exactly, as in Nova
            forced = set(request.force_nodes)
            nodes = set(candidate.nodes or tuple(host.nodes))
            if not nodes & forced:
                return "no node of the host is in force_nodes"
        return None
