"""``/v1/commitments``: committed reservations, placed through the pipelines (admin)."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import current_app, jsonify
from sqlalchemy.exc import SQLAlchemyError

from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.commitments import Commitment
from cortex.scheduler.service import SchedulingFailed
from cortex.simulator.commitments import (
    CommitmentInvalid,
    CommitmentRefused,
    place,
)
from cortex.store.commitments import (
    commitment_document,
    delete_commitment,
    list_commitments,
    save_commitment,
)


def parse_time(text: str, name: str) -> datetime:
    """An ISO 8601 time with its zone (none given: UTC); ValueError naming ``name``."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not an ISO 8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def spec_from(body: dict, now: datetime) -> Commitment:
    """What a valid ``CommitmentCreate`` body asks for: a commitment without id and holds.

    Raises ValueError for a time that is not ISO 8601.
    """
    return Commitment(  # JSON Schema's integers include 8.0: made ints here
        "", body["project_id"], body.get("availability_zone"), int(body["vcpus"]),
        int(body["memory_mb"]), int(body.get("gpus", 0)),
        tuple(p.lower() for p in body.get("products") or ()),
        int(body["count"]), parse_time(body["start_at"], "start_at") if body.get("start_at")
        else now, parse_time(body["end_at"], "end_at"), now, body.get("description"))


def commit(services, body: object, now: datetime) -> Commitment:
    """Validate ``body`` (a ``CommitmentCreate``), place it and store it; the commitment.

    ``services``: the app's (``app.extensions["cortex"]``). Raises CommitmentInvalid
    for a body that is not one (or ends before it starts, or names a zone without
    hosts), CommitmentRefused when not every instance fits (nothing stored),
    SchedulingFailed, KnowledgeUnavailable or SQLAlchemyError when the scheduler,
    the knowledge or the database is unavailable.
    """
    errors = services.validator.commitment_errors(body)
    if errors:
        raise CommitmentInvalid("; ".join(errors))
    try:
        spec = spec_from(body, now)  # type: ignore[arg-type]
        commitment = place(services.scheduler, spec, now)
    except ValueError as exc:
        raise CommitmentInvalid(str(exc)) from None
    with services.engine.begin() as connection:
        save_commitment(connection, commitment)
    return commitment


def create_commitment():
    """``POST /v1/commitments``: place, store, 201 with the commitment (:func:`commit`).

    400 for a body that is not a ``CommitmentCreate`` (or ends before it starts, or
    names a zone without hosts), 409 when not every instance fits (nothing stored),
    503 when the knowledge or the database is unavailable.
    """
    services = current_app.extensions["cortex"]
    body = read_json_body()
    now = datetime.now(UTC)
    try:
        commitment = commit(services, body, now)
    except CommitmentInvalid as exc:
        raise ApiError(400, str(exc)) from None
    except CommitmentRefused as exc:
        raise ApiError(409, str(exc)) from None
    except SchedulingFailed as exc:
        raise ApiError(503, f"scheduler unavailable: {exc.detail}") from None
    except KnowledgeUnavailable as exc:
        raise ApiError(503, f"knowledge unavailable: {exc}") from None
    except SQLAlchemyError as exc:
        raise ApiError(503, f"database unreachable: {type(exc).__name__}") from None
    document = commitment_document(commitment, services.knowledge.view().hosts, now)
    return jsonify(document), 201


def _stored():
    """Every stored commitment and the view's hosts; 503 when the database fails."""
    services = current_app.extensions["cortex"]
    try:
        with services.engine.connect() as connection:
            found = list_commitments(connection)
        hosts = services.knowledge.view().hosts
    except (SQLAlchemyError, KnowledgeUnavailable) as exc:
        raise ApiError(503, f"database unreachable: {type(exc).__name__}") from None
    return found, hosts


def list_all():
    """``GET /v1/commitments``: every commitment, oldest first."""
    found, hosts = _stored()
    now = datetime.now(UTC)
    return jsonify(commitments=[commitment_document(c, hosts, now) for c in found])


def show_commitment(commitment_id: str):
    """``GET /v1/commitments/<id>``: one commitment; 404 if none."""
    found, hosts = _stored()
    for commitment in found:
        if commitment.id == commitment_id:
            return jsonify(commitment_document(commitment, hosts, datetime.now(UTC)))
    raise ApiError(404, f"no commitment {commitment_id}")


def remove_commitment(commitment_id: str):
    """``DELETE /v1/commitments/<id>``: 204; its room is free from the next view on."""
    try:
        with current_app.extensions["cortex"].engine.begin() as connection:
            gone = delete_commitment(connection, commitment_id)
    except SQLAlchemyError as exc:
        raise ApiError(503, f"database unreachable: {type(exc).__name__}") from None
    if not gone:
        raise ApiError(404, f"no commitment {commitment_id}")
    return "", 204
