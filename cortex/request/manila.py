"""ManilaRequest: the Manila scheduler's share request spec, parsed once into typed fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cortex.request.base import (
    frozen,
    strings,
    unwrap,
)
from cortex.request.cinder import StorageCall, StorageType, caller_fields


@dataclass(frozen=True, slots=True)
class ManilaRequest(StorageCall):
    """A Manila scheduling request (``POST /scheduler/manila/external``).

    ``size`` is GiB from ``share_properties`` (``resource_properties`` as fallback).
    ``availability_zone_id`` is the UUID of the requested zone (Manila's
    ``availability_zones.id``), read as Manila's AvailabilityZoneFilter reads it
    (manila/scheduler/filters/availability_zone.py): from ``resource_properties``, else
    ``share_instance_properties`` (what Manila builds ``resource_properties`` from), else
    the spec's top level; None when none holds one. ``availability_zones`` are zone
    names (a share type's ``availability_zones`` extra spec), often empty.
    Replica requests carry ``active_replica_host``; shares from snapshots carry
    ``snapshot_host`` (Manila's own filters already keep compatible pools only).
    """

    share_id: str | None
    share_proto: str | None
    share_type: StorageType
    availability_zone_id: str | None
    metadata: Mapping[str, Any]
    snapshot_host: str | None
    share_group_id: str | None
    share_network_id: str | None
    active_replica_host: str | None
    all_replica_hosts: tuple[str, ...]
    service: str = field(default="manila", init=False)

    @property
    def resource_id(self) -> str | None:
        """The share id, the resource this decision is about."""
        return self.share_id

    @property
    def intent(self) -> str:
        """``create_replica`` for replicas, ``create_share`` otherwise."""
        return "create_replica" if self.active_replica_host else "create_share"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ManilaRequest:
        """Parse a validated body (plain dict or ``versioned_object`` envelopes)."""
        spec = unwrap(body["spec"])
        props = unwrap(spec.get("share_properties") or spec.get("resource_properties"))
        replica_hosts = spec.get("all_replica_hosts") or ""
        if isinstance(replica_hosts, str):
            replica_hosts = [h for h in replica_hosts.split(",") if h]
        return cls(
            **caller_fields(body, props),
            share_id=spec.get("share_id") or props.get("id"),
            size=int(props.get("size") or 0),
            share_proto=spec.get("share_proto") or props.get("share_proto"),
            share_type=StorageType.from_spec(unwrap(spec.get("share_type"))),
            availability_zones=strings(spec.get("availability_zones")),
            availability_zone_id=requested_zone_id(spec),
            resource_properties=frozen(props),
            metadata=frozen(props.get("metadata")),
            snapshot_id=spec.get("snapshot_id") or props.get("snapshot_id"),
            snapshot_host=spec.get("snapshot_host"),
            share_group_id=props.get("share_group_id"),
            share_network_id=props.get("share_network_id")
            or unwrap(spec.get("resource_properties")).get("share_network_id"),
            active_replica_host=spec.get("active_replica_host"),
            all_replica_hosts=strings(replica_hosts),
        )


def requested_zone_id(spec: Mapping[str, Any]) -> str | None:
    """The requested zone's UUID in a Manila request spec, or None.

    Manila's AvailabilityZoneFilter takes ``resource_properties``'
    ``availability_zone_id`` when the key is there (a null one included) and the
    spec's own otherwise; a spec without ``resource_properties`` has its
    ``share_instance_properties`` in their place. An empty string is None.
    """
    for key in ("resource_properties", "share_instance_properties"):
        props = unwrap(spec.get(key))
        if "availability_zone_id" in props:
            found = props["availability_zone_id"]
            break
    else:
        found = spec.get("availability_zone_id")
    return str(found) if found else None
