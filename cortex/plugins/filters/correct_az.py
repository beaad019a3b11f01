"""filter_correct_az: keep hosts and pools in the requested availability zone.

Nova (AvailabilityZoneFilter and the Placement pre-filter ``map_az_to_placement_aggregate``):
a host is in the AZ of its AZ aggregate, and a host in none is in
``default_availability_zone`` (Nova's option, ``nova`` by default) — so such hosts
are handled explicitly, not dropped by accident. Cinder and Manila
(AvailabilityZoneFilter): the pool's zone must be one of the request's
``availability_zones``. No zone requested: the filter does not run. Invert: none;
set ``default_availability_zone`` to place zone-less hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView, StoragePoolState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import (
    Candidate,
    SchedulingRequest,
)


@dataclass(frozen=True)
class CorrectAzOptions:
    """``default_availability_zone``: the zone of hosts in no AZ aggregate (Nova's default)."""

    default_availability_zone: str = "nova"


@register
class CorrectAzFilter(Filter[SchedulingRequest, HostState | StoragePoolState]):
    """Remove hosts or pools outside the requested availability zone(s)."""

    name = "filter_correct_az"
    services = ("nova", "cinder", "manila")
    Options = CorrectAzOptions

    def memo_key(self, request: SchedulingRequest) -> tuple[str, ...]:
        """The requested zones."""
        return self._zones(request)

    def applies(self, request: SchedulingRequest) -> bool:
        """Only when the request names a zone."""
        return bool(self._zones(request))

    def check(self, host: HostState | StoragePoolState, request: SchedulingRequest,
              candidate: Candidate) -> str | None:
        """Reason when the host's zone is not requested."""
        zone = host.availability_zone or self.options.default_availability_zone
        zones = self._zones(request)
        if zone in zones:
            return None
        return f"availability zone {zone} is not the requested {', '.join(zones)}"

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState | StoragePoolState]],
                  request: SchedulingRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, the requested zones read once."""
        zones, default = self._zones(request), self.options.default_availability_zone
        return {c.host: reason for c, s in hosts
                if (s.availability_zone or default) not in zones
                and (reason := self.check(s, request, c)) is not None}

    @staticmethod
    def _zones(request) -> tuple[str, ...]:
        """The zones the request accepts."""
        if request.service == "nova":
            return (request.availability_zone,) if request.availability_zone else ()
        return request.availability_zones
