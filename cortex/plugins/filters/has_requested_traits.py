"""filter_has_requested_traits: required traits present, forbidden traits absent.

Placement's trait rules for Nova's request: flavor extra specs
``trait[N]:NAME=required|forbidden`` and the request level's ``root_required`` /
``root_forbidden`` (``RequestLevelParams``, e.g. ``!COMPUTE_STATUS_DISABLED``).
Cortex checks them against the union of the host's provider traits, which is exact
for single-provider hosts and lenient for nested providers. Ownership traits
(os-traits' ``owner`` namespace: ``OWNER_NOVA``, ``OWNER_CYBORG``; Nova 34's resource
tracker puts ``OWNER_NOVA`` on every compute node provider, ``nova/compute/
resource_tracker.py``, and its scheduler requires it on the root provider and PCI request
groups once every nova-compute reports service version 73, ``nova/scheduler/
request_filter.py owner_nova_filter``; Nova master always will) are
checked only where Cortex knows the host's ownership traits, i.e. the host has some
``OWNER_*`` trait: elsewhere (knowledge from a fleet file or a sync before Nova 34) the
fact is missing, and Placement already kept only owned hosts. Invert: none; the
flavor's ``forbidden`` traits are the inverse of its ``required`` ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from cortex.knowledge.view import HostState, KnowledgeView
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@register
class HasRequestedTraitsFilter(Filter[NovaRequest, HostState]):
    """Remove hosts missing a required trait or having a forbidden one."""

    name = "filter_has_requested_traits"

    def memo_key(self, request: NovaRequest) -> tuple[frozenset[str], frozenset[str]]:
        """The required and forbidden traits."""
        return (request.required_traits | request.root_required,
                request.forbidden_traits | request.root_forbidden)

    def applies(self, request: NovaRequest) -> bool:
        """Only when the request names traits."""
        return bool(request.required_traits or request.forbidden_traits
                    or request.root_required or request.root_forbidden)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason naming the first missing or forbidden trait."""
        missing = known(request.required_traits | request.root_required, host.traits) \
            - host.traits
        if missing:
            return f"missing required trait {sorted(missing)[0]}"
        present = (request.forbidden_traits | request.root_forbidden) & host.traits
        if present:
            return f"has forbidden trait {sorted(present)[0]}"
        return None

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState]], request: NovaRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, the request's trait sets joined once."""
        required = request.required_traits | request.root_required
        forbidden = request.forbidden_traits | request.root_forbidden
        return {c.host: reason for c, s in hosts
                if not (known(required, s.traits) <= s.traits
                        and forbidden.isdisjoint(s.traits))
                and (reason := self.check(s, request, c)) is not None}


def known(required: frozenset[str], host_traits: frozenset[str]) -> frozenset[str]:
    """``required`` less the ownership traits (``OWNER_*``) when the host reports none.

    Traits are Placement names (strings); returns a subset of ``required``.
    """
    if any(t.startswith(OWNER_PREFIX) for t in host_traits):
        return required
    return frozenset(t for t in required if not t.startswith(OWNER_PREFIX))


#: os-traits' ``owner`` namespace (os_traits/owner/__init__.py: CYBORG, NOVA).
OWNER_PREFIX = "OWNER_"
