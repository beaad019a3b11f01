"""filter_excluded_hosts: an operator's static list of hosts never to schedule to.

Hosts whose name matches one of ``hosts`` (shell-style patterns: ``cmp00[5-9]*``,
``nova-compute-bb*``; case-insensitive) are removed, whatever the request. For
temporary exclusions, disabling the compute service (filter_status) is Nova's way;
this list is for hosts Cortex must never pick even when Nova offers them. Not run on
rebuild (the instance stays where it is). Invert: none; empty the list.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@dataclass(frozen=True)
class ExcludedHostsOptions:
    """``hosts``: host names or shell-style patterns to exclude."""

    hosts: tuple[str, ...] = ()


@register
class ExcludedHostsFilter(Filter[NovaRequest, HostState]):
    """Remove hosts on the operator's exclude list."""

    name = "filter_excluded_hosts"
    Options = ExcludedHostsOptions

    def applies(self, request: NovaRequest) -> bool:
        """Only when the list is not empty."""
        return bool(self.options.hosts)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason naming the matching pattern."""
        name = candidate.host.lower()
        for pattern in self.options.hosts:
            if fnmatchcase(name, pattern.lower()):
                return f"host matches excluded {pattern}"
        return None
