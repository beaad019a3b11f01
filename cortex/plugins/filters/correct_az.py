"""filter_correct_az: keep hosts and pools in the requested availability zone.

Nova (AvailabilityZoneFilter and the Placement pre-filter ``map_az_to_placement_aggregate``):
a host is in the AZ of its AZ aggregate, and a host in none is in
``default_availability_zone`` (Nova's option, ``nova`` by default) — so such hosts
are handled explicitly, not dropped by accident. Cinder and Manila
(AvailabilityZoneFilter): the pool's zone must be one of the request's
``availability_zones`` (names). Manila (manila/scheduler/filters/availability_zone.py)
also names the requested zone by its id, ``availability_zone_id`` (a UUID,
:attr:`cortex.request.ManilaRequest.availability_zone_id`), and removes a pool whose
share service's zone id is another; both checks apply when both are requested. A pool
whose zone id Cortex does not know (``StoragePoolState.availability_zone_id`` None: a
zone Manila's ``GET /availability-zones`` did not list, or a fleet-file pool that
names none) is judged by its name only: Manila's own filter compared the ids of every
pool it sent, so such a pool is not removed on a guess. No zone requested: the
filter does not run. Invert: none; set ``default_availability_zone`` to place
zone-less hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cortex.knowledge.view import HostState, KnowledgeView, StoragePoolState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, ManilaRequest, NovaRequest, SchedulingRequest


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

    def memo_key(self, request: SchedulingRequest) -> tuple[str | None, tuple[str, ...]]:
        """The requested zone id (Manila; else None) and zone names."""
        return self._zone_id(request), self._zones(request)

    def applies(self, request: SchedulingRequest) -> bool:
        """Only when the request names a zone, by name or by id."""
        return bool(self._zones(request)) or self._zone_id(request) is not None

    def check(self, host: HostState | StoragePoolState, request: SchedulingRequest,
              candidate: Candidate) -> str | None:
        """Reason when the host's zone id or zone name is not the requested one."""
        return self._reason(host, self._zone_id(request), self._zones(request))

    def check_all(self, hosts: Sequence[tuple[Candidate, HostState | StoragePoolState]],
                  request: SchedulingRequest,
                  view: KnowledgeView | None) -> dict[str, str]:
        """``check`` of every host, the requested zone id and names read once."""
        zone_id, zones = self._zone_id(request), self._zones(request)
        if zone_id is None:  # names only: a host in a requested zone needs no call
            default = self.options.default_availability_zone
            return {c.host: reason for c, s in hosts
                    if (s.availability_zone or default) not in zones
                    and (reason := self._reason(s, None, zones)) is not None}
        return {c.host: reason for c, s in hosts
                if (reason := self._reason(s, zone_id, zones)) is not None}

    def _reason(self, host: HostState | StoragePoolState, zone_id: str | None,
                zones: tuple[str, ...]) -> str | None:
        """Manila's id check (where the pool's id is known), then the names."""
        known = getattr(host, "availability_zone_id", None)
        if zone_id is not None and known is not None and known != zone_id:
            named = f" ({host.availability_zone})" if host.availability_zone else ""
            return f"availability zone id {known}{named} is not the requested {zone_id}"
        if not zones:
            return None
        zone = host.availability_zone or self.options.default_availability_zone
        if zone in zones:
            return None
        return f"availability zone {zone} is not the requested {', '.join(zones)}"

    @staticmethod
    def _zone_id(request: SchedulingRequest) -> str | None:
        """The requested zone's id: Manila's ``availability_zone_id``, None elsewhere."""
        return request.availability_zone_id if isinstance(request, ManilaRequest) else None

    @staticmethod
    def _zones(request: SchedulingRequest) -> tuple[str, ...]:
        """The zone names the request accepts."""
        if isinstance(request, NovaRequest):
            return (request.availability_zone,) if request.availability_zone else ()
        return request.availability_zones
