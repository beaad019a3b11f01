"""Committed reservations as the API and the CLI ask for them: create, list, delete.

:func:`create` is the one write: :func:`cortex.store.commitments.write_commitment`
(one transaction under the commitments' lock) around
:func:`cortex.simulator.commitments.place`, within the scheduler's
``request_time_budget``. The errors a caller answers are exported from here, so that a
handler need not reach into the layers that raise them.
"""

from __future__ import annotations

import time
from datetime import datetime
from functools import partial
from typing import Any

from cortex.db import guard
from cortex.knowledge.commitments import Commitment
from cortex.scheduler.service import NO_BUDGET_WAIT, SchedulerService
from cortex.simulator.commitments import (
    STORE_MARGIN,
    CommitmentInvalid,
    CommitmentRefused,
    CommitmentTimedOut,
    place,
)
from cortex.store.commitments import (
    CommitmentLockTimeout,
    IdempotencyConflict,
    commitment_document,
    delete_commitment,
    list_commitments,
    write_commitment,
)

__all__ = ["CommitmentInvalid", "CommitmentLockTimeout", "CommitmentRefused",
           "CommitmentTimedOut", "IdempotencyConflict", "commitment_document", "create",
           "delete", "stored"]


def create(scheduler: SchedulerService, engine: Any, spec: Commitment, now: datetime,
           idempotency_key: str | None = None,
           request_digest: str | None = None) -> tuple[Commitment, bool]:
    """Place ``spec`` (:func:`cortex.knowledge.commitments.commitment_spec`) and store it.

    ``engine``: the database's SQLAlchemy engine. The write takes at most the
    scheduler's ``request_time_budget``: the lock is waited for, and the instances
    placed, until :data:`~cortex.simulator.commitments.STORE_MARGIN` s before its end,
    and every database wait ends with it. Returns ``(commitment, created)``: ``created``
    False when ``idempotency_key`` already created it from a body of the same
    ``request_digest``. Raises CommitmentInvalid (ends before it starts, names a zone
    without hosts, holds a value the database refuses), CommitmentRefused (not every
    instance fits; nothing stored), IdempotencyConflict, CommitmentTimedOut,
    CommitmentLockTimeout, SchedulingFailed, KnowledgeUnavailable or SQLAlchemyError.
    """
    budget = scheduler.settings.request_time_budget or NO_BUDGET_WAIT
    until = time.monotonic() + budget - STORE_MARGIN
    with guard.deadline(budget):
        try:
            return write_commitment(
                engine, partial(place, scheduler, spec, now, until=until), idempotency_key,
                request_digest, lock_timeout=max(until - time.monotonic(), 0.001))
        except ValueError as exc:
            raise CommitmentInvalid(str(exc)) from None


def stored(engine: Any) -> tuple[Commitment, ...]:
    """Every stored commitment with its holds, oldest first."""
    return list_commitments(engine)


def delete(engine: Any, commitment_id: str) -> bool:
    """Delete a commitment; its room is free from the next view on. False if there was none."""
    return delete_commitment(engine, commitment_id)
