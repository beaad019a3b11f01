"""ManilaRequest: the Manila scheduler's share request spec, parsed once into typed fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cortex.request.base import (
    CandidateList,
    context_ids,
    frozen,
    parse_candidates,
    strings,
    unwrap,
)
from cortex.request.cinder import StorageType


@dataclass(frozen=True, slots=True)
class ManilaRequest:
    """A Manila scheduling request (``POST /scheduler/manila/external``).

    ``size`` is GiB from ``share_properties`` (``resource_properties`` as fallback).
    Replica requests carry ``active_replica_host``; shares from snapshots carry
    ``snapshot_host`` (Manila's own filters already keep compatible pools only).
    """

    candidates: CandidateList
    share_id: str | None
    size: int
    share_proto: str | None
    share_type: StorageType
    availability_zones: tuple[str, ...]
    resource_properties: Mapping[str, Any]
    metadata: Mapping[str, Any]
    snapshot_id: str | None
    snapshot_host: str | None
    share_group_id: str | None
    share_network_id: str | None
    active_replica_host: str | None
    all_replica_hosts: tuple[str, ...]
    project_id: str | None
    request_id: str | None = None
    global_request_id: str | None = None
    pipeline: str | None = None
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
        request_id, global_request_id, project = context_ids(body)
        replica_hosts = spec.get("all_replica_hosts") or ""
        if isinstance(replica_hosts, str):
            replica_hosts = [h for h in replica_hosts.split(",") if h]
        return cls(
            candidates=parse_candidates(body),
            share_id=spec.get("share_id") or props.get("id"),
            size=int(props.get("size") or 0),
            share_proto=spec.get("share_proto") or props.get("share_proto"),
            share_type=StorageType.from_spec(unwrap(spec.get("share_type"))),
            availability_zones=strings(spec.get("availability_zones")),
            resource_properties=frozen(props),
            metadata=frozen(props.get("metadata")),
            snapshot_id=spec.get("snapshot_id") or props.get("snapshot_id"),
            snapshot_host=spec.get("snapshot_host"),
            share_group_id=props.get("share_group_id"),
            share_network_id=props.get("share_network_id")
            or unwrap(spec.get("resource_properties")).get("share_network_id"),
            active_replica_host=spec.get("active_replica_host"),
            all_replica_hosts=strings(replica_hosts),
            project_id=props.get("project_id") or project,
            request_id=request_id,
            global_request_id=global_request_id,
            pipeline=body.get("pipeline"),
        )
