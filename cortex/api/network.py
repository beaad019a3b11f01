"""The network topology and in-flight reservations as the scheduler sees them (read-only)."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import current_app, jsonify

from cortex.api.errors import ApiError
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.scheduler.groups import group_promises


def show_network_topology():
    """``GET /v1/network-topology``: spines, leaves and host locations with their source."""
    try:
        view = current_app.extensions["cortex"].knowledge.view()
    except KnowledgeUnavailable as exc:
        raise ApiError(503, f"knowledge unavailable: {exc}") from None
    return jsonify(view.network.as_dict())


def list_reservations():
    """``GET /v1/reservations``: the unexpired in-flight reservations and group promises.

    Both oldest first; ``groups``: :meth:`cortex.store.group_promises.GroupPromise.as_dict`.
    """
    store, now = current_app.extensions["cortex"].reservations, datetime.now(UTC)
    try:
        found, groups = store.active(now), group_promises(store, now)
    except Exception as exc:  # noqa: BLE001 - the database down is a 503, not a 500
        raise ApiError(503, f"reservations unreadable: {type(exc).__name__}") from None
    return jsonify(groups=groups, reservations=[{
        "id": r.id, "host": r.host, "instance_uuid": r.instance_uuid, "group_id": r.group_id,
        "resources": dict(r.resources), "gpus": list(r.gpus),
        "created_at": r.created_at.isoformat(), "expires_at": r.expires_at.isoformat()}
        for r in sorted(found, key=lambda r: r.created_at)])
