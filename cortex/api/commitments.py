"""``/v1/commitments``: committed reservations, placed through the pipelines (admin)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime

from flask import current_app, jsonify, request

from cortex.api.body import read_json_body
from cortex.api.errors import ApiError
from cortex.knowledge.cache import KnowledgeUnavailable
from cortex.knowledge.commitments import Commitment, commitment_spec
from cortex.scheduler.service import SchedulingFailed
from cortex.services import commitments as service
from cortex.services.commitments import (
    CommitmentInvalid,
    CommitmentLockTimeout,
    CommitmentRefused,
    CommitmentTimedOut,
    IdempotencyConflict,
    commitment_document,
)

#: What an ``Idempotency-Key`` may be: 1 to 255 visible ASCII characters.
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def request_digest(body: object) -> str:
    """The SHA-256 (hex) of ``body``'s canonical JSON: equal bodies, equal digests."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def commit(services, body: object, now: datetime,
           idempotency_key: str | None = None) -> tuple[Commitment, bool]:
    """Validate ``body`` (a ``CommitmentCreate``), then create it (the API's and the CLI's).

    ``services``: the app's (``app.extensions["cortex"]``). Parses, then calls
    :func:`cortex.services.commitments.create` (its budget, returns and errors).
    Raises CommitmentInvalid for a body that is not one.
    """
    errors = services.validator.commitment_errors(body)
    if errors:
        raise CommitmentInvalid("; ".join(errors))
    try:
        spec = commitment_spec(body, now)  # type: ignore[arg-type]
    except ValueError as exc:
        raise CommitmentInvalid(str(exc)) from None
    return service.create(services.scheduler, services.engine, spec, now, idempotency_key,
                          request_digest(body))


def idempotency_key() -> str | None:
    """The request's ``Idempotency-Key`` header (None: none); 400 for a malformed one."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(key):
        raise ApiError(400, "Idempotency-Key must be 1 to 255 visible ASCII characters")
    return key


def create_commitment():
    """``POST /v1/commitments``: place, store, 201 with the commitment (:func:`commit`).

    400 for a body that is not a ``CommitmentCreate`` (or ends before it starts, or
    names a zone without hosts) or a malformed ``Idempotency-Key``, 409 when not every
    instance fits (nothing stored), 422 when the ``Idempotency-Key`` created a
    commitment from another body, 503 when the knowledge or the database is
    unavailable, another commitment holds the lock, or the placement runs past the
    budget. A retry with the ``Idempotency-Key`` of a commitment created before
    answers that one, 201 with ``Idempotent-Replayed: true``.
    """
    services = current_app.extensions["cortex"]
    key = idempotency_key()
    body = read_json_body()
    now = datetime.now(UTC)
    try:
        commitment, created = commit(services, body, now, key)
    except CommitmentInvalid as exc:
        raise ApiError(400, str(exc)) from None
    except CommitmentRefused as exc:
        raise ApiError(409, str(exc)) from None
    except IdempotencyConflict as exc:
        raise ApiError(422, str(exc), "cortex.idempotency_key_reused") from None
    except (CommitmentLockTimeout, CommitmentTimedOut) as exc:
        raise ApiError(503, str(exc), "cortex.commitment_budget") from None
    except SchedulingFailed as exc:
        raise ApiError(503, f"scheduler unavailable: {exc.detail}") from None
    except KnowledgeUnavailable as exc:
        raise ApiError(503, f"knowledge unavailable: {exc}") from None
    document = commitment_document(commitment, services.knowledge.view().hosts, now)
    response = jsonify(document)
    response.status_code = 201
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


def _stored():
    """Every stored commitment and the view's hosts; 503 when either is unavailable."""
    services = current_app.extensions["cortex"]
    found = service.stored(services.engine)
    try:
        hosts = services.knowledge.view().hosts
    except KnowledgeUnavailable as exc:
        raise ApiError(503, f"knowledge unavailable: {exc}") from None
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
    if not service.delete(current_app.extensions["cortex"].engine, commitment_id):
        raise ApiError(404, f"no commitment {commitment_id}")
    return "", 204
