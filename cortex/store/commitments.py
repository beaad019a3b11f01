"""Committed reservations in the database: store one with its holds, list, delete.

A commitment and its holds are written in one transaction with a knowledge-version
bump, so every API worker's next view carries it (``KnowledgeView.commitments``) and
the scheduler counts its room from then on; a delete frees the room the same way.
Reading goes through :func:`cortex.knowledge.loader.read_commitments`, the loader's own.

Placing and storing a commitment happen under :func:`lock_commitments`, so that two
placements never count the same free room: the placement reads the stored
commitments inside the lock (not a worker's view, which may be a version behind) and
the lock is held until the rows are committed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, text, update
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.orm import Session

from cortex.db import models
from cortex.knowledge.commitments import Commitment, free_holds
from cortex.knowledge.loader import read_commitments
from cortex.store.version import bump_version

#: PostgreSQL's SQLSTATE for a lock not granted within ``lock_timeout``.
LOCK_NOT_AVAILABLE = "55P03"


#: The advisory lock of commitment writes: (namespace, key), apart from the host locks of
#: the reservation store (:data:`cortex.store.reservations.LOCK_NAMESPACE`) and the sync's.
LOCK_KEY = (0x434F5243 & 0x7FFFFFFF, 1)  # "CORC": Cortex commitments


class CommitmentLockTimeout(Exception):
    """Another commitment held the write lock longer than the caller could wait (503)."""


class IdempotencyConflict(Exception):
    """An Idempotency-Key already created a commitment from another body (422)."""


class CommitmentUnstorable(ValueError):
    """The database refused a value of the commitment (a DataError); nothing was stored."""


def write_commitment(engine: Engine, place: Callable[[tuple[Commitment, ...]], Commitment],
                     idempotency_key: str | None = None, request_digest: str | None = None,
                     lock_timeout: float | None = None) -> tuple[Commitment, bool]:
    """Decide and store a commitment in one transaction under :func:`lock_commitments`.

    ``place(stored)`` decides the commitment from the commitments stored when the lock
    was granted (:func:`cortex.simulator.commitments.place`); what it returns is stored
    before the lock is let go, so two writers never count the same free room. Returns
    ``(commitment, created)``: ``created`` False when ``idempotency_key`` (the create's
    ``Idempotency-Key``) already created one from a body of the same ``request_digest``
    (that one is returned, ``place`` not called). ``lock_timeout``: seconds to wait for
    the lock (None: the connection's ``lock_timeout``).

    Raises IdempotencyConflict (the key was used with another body),
    CommitmentLockTimeout, CommitmentUnstorable, whatever ``place`` raises (nothing is
    stored) and SQLAlchemyError.
    """
    try:
        return _write_commitment(engine, place, idempotency_key, request_digest,
                                 lock_timeout)
    except DataError as exc:
        raise CommitmentUnstorable(
            f"the database refused a value: {str(exc.orig).splitlines()[0][:200]}") from None


def _write_commitment(engine: Engine, place: Callable[[tuple[Commitment, ...]], Commitment],
                      idempotency_key: str | None, request_digest: str | None,
                      lock_timeout: float | None) -> tuple[Commitment, bool]:
    """:func:`write_commitment`, its DataError not yet translated."""
    with engine.begin() as connection:
        lock_commitments(connection, lock_timeout)
        if idempotency_key is not None:
            found = stored_by_key(connection, idempotency_key)
            if found is not None:
                if found[1] != request_digest:
                    raise IdempotencyConflict(
                        f"Idempotency-Key {idempotency_key!r} created commitment "
                        f"{found[0].id} from another body")
                return found[0], False
        commitment = place(list_commitments(connection))
        save_commitment(connection, commitment, idempotency_key, request_digest)
    return commitment, True


def lock_commitments(connection: Connection, timeout: float | None = None) -> None:
    """Hold the lock of every commitment write until the caller's transaction ends.

    PostgreSQL: a transaction-level advisory lock, waited for at most ``timeout`` s
    (``lock_timeout``; None: as the connection's own setting), else
    :class:`CommitmentLockTimeout`. SQLite: the database's write lock, taken by a write
    that changes nothing (its busy timeout bounds the wait). Must be the transaction's
    first statement on SQLite, where a transaction that read first may not write.
    """
    if connection.dialect.name != "postgresql":
        table = models.KnowledgeVersion.__table__
        connection.execute(update(table).where(table.c.id == 1).values(version=table.c.version))
        return
    if timeout is not None:
        milliseconds = max(1, int(timeout * 1000))
        connection.execute(text(f"SET LOCAL lock_timeout = {milliseconds}"))
    try:
        connection.execute(text("SELECT pg_advisory_xact_lock(:namespace, :key)"),
                           {"namespace": LOCK_KEY[0], "key": LOCK_KEY[1]})
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        raise CommitmentLockTimeout(  # the transaction is aborted: the caller's rolls back
            f"another commitment was being placed for longer than {timeout:g} s") from None
    if timeout is not None:
        connection.execute(text("SET LOCAL lock_timeout = DEFAULT"))


def stored_by_key(connection: Connection, key: str) -> tuple[Commitment, str | None] | None:
    """The commitment a POST with Idempotency-Key ``key`` created, and its body's digest.

    None when no stored commitment has that key (or it was deleted since).
    """
    table = models.Commitment.__table__
    found = connection.execute(select(table.c.id, table.c.request_digest)
                               .where(table.c.idempotency_key == key)).first()
    if found is None:
        return None
    for commitment in list_commitments(connection):
        if commitment.id == found.id:
            return commitment, found.request_digest
    return None


def save_commitment(connection: Connection, commitment: Commitment,
                    idempotency_key: str | None = None,
                    request_digest: str | None = None) -> None:
    """Insert ``commitment`` and its holds and move the knowledge version (caller's transaction).

    ``idempotency_key`` and ``request_digest``: the creating POST's key and body digest
    (:func:`stored_by_key`), None for one made without a key.
    """
    connection.execute(insert(models.Commitment.__table__).values(
        id=commitment.id, project_id=commitment.project_id,
        availability_zone=commitment.availability_zone, vcpus=commitment.vcpus,
        memory_mb=commitment.memory_mb, gpus=commitment.gpus,
        products=list(commitment.products), count=commitment.count,
        start_at=commitment.start_at, end_at=commitment.end_at,
        created_at=commitment.created_at, description=commitment.description,
        idempotency_key=idempotency_key, request_digest=request_digest))
    if commitment.holds:
        connection.execute(insert(models.CommitmentHold.__table__), [{
            "id": h.id, "commitment_id": h.commitment_id, "host": h.host,
            "resources": dict(h.resources), "gpus": list(h.gpus), "baseline": h.baseline,
            "instance_uuid": h.instance_uuid}
            for h in commitment.holds])
    bump_version(connection)


def delete_commitment(bind: Connection | Engine, commitment_id: str) -> bool:
    """Delete a commitment (its holds go with it); False when there was none.

    ``bind``: a connection in the caller's transaction, or an engine (a transaction of
    its own).
    """
    if isinstance(bind, Engine):
        with bind.begin() as connection:
            return delete_commitment(connection, commitment_id)
    connection = bind
    table = models.Commitment.__table__
    gone = connection.execute(delete(table).where(table.c.id == commitment_id)).rowcount
    if gone:
        connection.execute(delete(models.CommitmentHold.__table__).where(
            models.CommitmentHold.commitment_id == commitment_id))  # SQLite keeps no FKs
        bump_version(connection)
    return bool(gone)


def follow_instances(connection: Connection) -> int:
    """Keep each hold with the owner's instance that took it; how many holds changed.

    From the synced ``servers`` (run by the nova sync in its transaction; the caller
    moves the knowledge version):

    - a bound hold whose instance Nova moved (live or cold migration, resize to another
      host, evacuation) moves to the instance's host, with the GPUs the instance holds
      there where the agent reports them, and the owner's unbound instances there as
      its new ``baseline``;
    - a bound hold whose instance is gone is free again, on its last host;
    - on a host with free holds, the owner's instances bound to no hold, beyond the
      holds' ``baseline`` (the owner's instances there when the hold was made), are
      bound to them, newest first.

    Why: counting instances per host (:func:`cortex.knowledge.commitments.free_holds`)
    cannot tell a migrated instance from a new one; a bound hold can.
    """
    holds_table = models.CommitmentHold.__table__
    owners = dict(connection.execute(select(models.Commitment.id, models.Commitment.project_id)
                                      ).all())
    if not owners:
        return 0
    servers_table = models.Server.__table__
    servers = {row.uuid: row for row in connection.execute(select(
        servers_table.c.uuid, servers_table.c.host, servers_table.c.project_id,
        servers_table.c.created_at).where(servers_table.c.project_id.in_(set(owners.values()))))}
    holds = connection.execute(select(holds_table).order_by(holds_table.c.id)).all()
    bound = {h.instance_uuid for h in holds if h.instance_uuid}
    changed = 0
    for hold in holds:
        if not hold.instance_uuid:
            continue
        server = servers.get(hold.instance_uuid)
        if server is None:
            connection.execute(update(holds_table).where(holds_table.c.id == hold.id)
                               .values(instance_uuid=None))
            bound.discard(hold.instance_uuid)
            changed += 1
        elif server.host and server.host != hold.host:
            others = sum(1 for s in servers.values() if s.host == server.host
                         and s.project_id == server.project_id and s.uuid not in bound)
            connection.execute(update(holds_table).where(holds_table.c.id == hold.id).values(
                host=server.host, gpus=_held_gpus(connection, server.host, server.uuid),
                baseline=others))
            changed += 1
    free: dict[tuple[str, str], list[Any]] = {}
    for hold in holds:
        if not hold.instance_uuid:
            free.setdefault((hold.commitment_id, hold.host), []).append(hold)
    for (commitment_id, host), waiting in sorted(free.items()):
        candidates = sorted((s for s in servers.values() if s.host == host
                             and s.project_id == owners.get(commitment_id)
                             and s.uuid not in bound),
                            key=lambda s: (s.created_at is not None, s.created_at, s.uuid),
                            reverse=True)
        takers = candidates[:max(0, len(candidates) - max(h.baseline for h in waiting))]
        for hold, server in zip(waiting, takers, strict=False):
            connection.execute(update(holds_table).where(holds_table.c.id == hold.id)
                               .values(instance_uuid=server.uuid))
            bound.add(server.uuid)
            changed += 1
    return changed


def _held_gpus(connection: Connection, host: str, instance_uuid: str) -> list[str]:
    """The GPUs (PCI addresses) the agent of ``host`` reports ``instance_uuid`` holding."""
    gpus, topologies = models.Gpu.__table__, models.HostTopology.__table__
    return sorted(connection.execute(select(gpus.c.pci_address).join(
        topologies, gpus.c.host_topology_id == topologies.c.id).where(
        topologies.c.host == host, gpus.c.instance_uuid == instance_uuid)).scalars())


def list_commitments(bind: Connection | Engine) -> tuple[Commitment, ...]:
    """Every stored commitment with its holds, oldest first (unreadable rows left out).

    ``bind``: a connection (the caller's transaction) or an engine.
    """
    with Session(bind) as session:
        return read_commitments(session)


def commitment_document(commitment: Commitment, hosts: Any, now: datetime) -> dict[str, Any]:
    """The API's and the CLI's shape of a commitment (``Commitment`` in openapi.yaml).

    Holds by host, then id: the same order however the commitment was read.

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
                   "gpus": list(h.gpus), "instance_uuid": h.instance_uuid}
                  for h in sorted(commitment.holds, key=lambda h: (h.host, h.id))]}
