"""Committed reservations in the database: store one with its holds, list, delete.

A commitment and its holds are written in one transaction with a knowledge-version
bump, so every API worker's next view carries it (``KnowledgeView.commitments``) and
the scheduler counts its room from then on; a delete frees the room the same way.
Reading goes through :func:`cortex.knowledge.loader.read_commitments`, the loader's own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert
from sqlalchemy.orm import Session

from cortex.db import models
from cortex.knowledge.commitments import Commitment, free_holds
from cortex.knowledge.loader import read_commitments
from cortex.store.version import bump_version


def save_commitment(connection: Connection, commitment: Commitment) -> None:
    """Insert ``commitment`` and its holds and move the knowledge version (caller's transaction)."""
    connection.execute(insert(models.Commitment.__table__).values(
        id=commitment.id, project_id=commitment.project_id,
        availability_zone=commitment.availability_zone, vcpus=commitment.vcpus,
        memory_mb=commitment.memory_mb, gpus=commitment.gpus,
        products=list(commitment.products), count=commitment.count,
        start_at=commitment.start_at, end_at=commitment.end_at,
        created_at=commitment.created_at, description=commitment.description))
    if commitment.holds:
        connection.execute(insert(models.CommitmentHold.__table__), [{
            "id": h.id, "commitment_id": h.commitment_id, "host": h.host,
            "resources": dict(h.resources), "gpus": list(h.gpus), "baseline": h.baseline}
            for h in commitment.holds])
    bump_version(connection)


def delete_commitment(connection: Connection, commitment_id: str) -> bool:
    """Delete a commitment (its holds go with it); False when there was none."""
    table = models.Commitment.__table__
    gone = connection.execute(delete(table).where(table.c.id == commitment_id)).rowcount
    if gone:
        connection.execute(delete(models.CommitmentHold.__table__).where(
            models.CommitmentHold.commitment_id == commitment_id))  # SQLite keeps no FKs
        bump_version(connection)
    return bool(gone)


def list_commitments(connection: Connection) -> tuple[Commitment, ...]:
    """Every stored commitment with its holds, oldest first."""
    with Session(connection) as session:
        return read_commitments(session)


def commitment_document(commitment: Commitment, hosts: Any, now: datetime) -> dict[str, Any]:
    """The API's and the CLI's shape of a commitment (``Commitment`` in openapi.yaml).

    ``hosts``: the view's host states, for ``in_use`` (holds the owner's instances
    consume, :func:`cortex.knowledge.commitments.free_holds`).
    """
    return {
        "id": commitment.id, "project_id": commitment.project_id,
        "availability_zone": commitment.availability_zone, "vcpus": commitment.vcpus,
        "memory_mb": commitment.memory_mb, "gpus": commitment.gpus,
        "products": list(commitment.products), "count": commitment.count,
        "start_at": commitment.start_at.isoformat(), "end_at": commitment.end_at.isoformat(),
        "created_at": commitment.created_at.isoformat(), "description": commitment.description,
        "state": commitment.state(now),
        "in_use": len(commitment.holds) - len(free_holds(commitment, hosts)),
        "holds": [{"id": h.id, "host": h.host, "resources": dict(h.resources),
                   "gpus": list(h.gpus)} for h in commitment.holds]}
