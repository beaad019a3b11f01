"""CinderRequest: the Cinder scheduler's request spec, parsed once into typed fields."""

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


@dataclass(frozen=True, slots=True)
class StorageType:
    """A volume or share type: id, name and extra specs (strings, ``<is> True`` kept as is)."""

    id: str | None
    name: str | None
    extra_specs: Mapping[str, str]

    @classmethod
    def from_spec(cls, value: Mapping[str, Any] | None) -> StorageType:
        """From the spec's ``volume_type``/``share_type`` dict (all fields optional)."""
        value = value or {}
        specs = {k: str(v) for k, v in (value.get("extra_specs") or {}).items()}
        return cls(id=value.get("id"), name=value.get("name"), extra_specs=frozen(specs))


@dataclass(frozen=True, slots=True, kw_only=True)
class StorageCall:
    """What a Cinder and a Manila request share: the caller's pools, the size, the ids.

    ``candidates``: the caller's pools in its order; ``size``: GiB asked;
    ``availability_zones``: the zones asked for (empty: any); ``resource_properties``:
    the spec's properties as sent; ``project_id``, ``request_id``,
    ``global_request_id``: the caller's; ``pipeline``: the one the body names (None:
    chosen by the rules). Keyword-only, so each service's own fields come first.
    """

    candidates: CandidateList
    size: int
    availability_zones: tuple[str, ...]
    resource_properties: Mapping[str, Any]
    snapshot_id: str | None
    project_id: str | None
    request_id: str | None = None
    global_request_id: str | None = None
    pipeline: str | None = None


def caller_fields(body: Mapping[str, Any], props: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`StorageCall` fields read from the body's hosts and context alone.

    The project is the properties' ``project_id``, else the context's.
    """
    request_id, global_request_id, project = context_ids(body)
    return {"candidates": parse_candidates(body), "project_id": props.get("project_id") or project,
            "request_id": request_id, "global_request_id": global_request_id,
            "pipeline": body.get("pipeline")}


@dataclass(frozen=True, slots=True)
class CinderRequest(StorageCall):
    """A Cinder scheduling request (``POST /scheduler/cinder/external``).

    ``size`` is GiB from ``volume_properties`` (``resource_properties`` as fallback).
    ``operation`` is the spec's ``operation`` (``extend_volume``, ``retype_volume``,
    ``migrate_volume``, ``create_snapshot``); create specs carry none (an upstream
    quirk), so ``create_volume`` is assumed. For ``extend_volume`` the new size travels
    in Cinder's filter properties, not in the body, so ``size`` is the current size.
    """

    operation: str
    volume_id: str | None
    volume_type: StorageType
    source_volid: str | None
    group_id: str | None
    backup_id: str | None
    image_id: str | None
    resource_backend: str | None
    multiattach: bool
    migration_policy: str | None
    service: str = field(default="cinder", init=False)

    @property
    def resource_id(self) -> str | None:
        """The volume id, the resource this decision is about."""
        return self.volume_id

    @property
    def intent(self) -> str:
        """The operation, the Cinder counterpart of Nova's intent."""
        return self.operation

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CinderRequest:
        """Parse a validated body (plain dict or ``versioned_object`` envelopes)."""
        spec = unwrap(body["spec"])
        props = unwrap(spec.get("volume_properties") or spec.get("resource_properties"))
        volume = unwrap(spec.get("volume"))
        zones = strings(spec.get("availability_zones")) or strings(props.get("availability_zone"))
        return cls(
            **caller_fields(body, props),
            operation=spec.get("operation") or "create_volume",
            volume_id=spec.get("volume_id") or volume.get("id") or props.get("id"),
            size=int(props.get("size") or 0),
            volume_type=StorageType.from_spec(
                unwrap(spec.get("volume_type") or props.get("volume_type"))),
            availability_zones=zones,
            resource_properties=frozen(props),
            snapshot_id=spec.get("snapshot_id") or props.get("snapshot_id"),
            source_volid=spec.get("source_volid") or props.get("source_volid"),
            group_id=spec.get("group_id") or props.get("group_id"),
            backup_id=spec.get("backup_id"),
            image_id=spec.get("image_id"),
            resource_backend=spec.get("resource_backend"),
            multiattach=bool(props.get("multiattach")),
            migration_policy=spec.get("migration_policy"),
        )
