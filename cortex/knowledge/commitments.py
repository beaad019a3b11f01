"""Committed reservations: room promised to a project for a period, and who may use it.

A :class:`Commitment` promises a project ``count`` instances of one shape (vCPUs,
memory, passthrough GPUs of some models as one NVLink set each) in one availability
zone from ``start_at`` to ``end_at``. When it is created, each instance is placed
through the pipelines like a Nova request (:mod:`cortex.simulator.commitments`) and
its room on the chosen host is kept as a :class:`Hold`: the resources and the GPUs
nova-compute would hand it. This module is pure; the view carries the commitments of
its knowledge version (``KnowledgeView.commitments``), the database keeps them
(:mod:`cortex.store.commitments`).

Who a hold counts against, while its commitment is active:

- another project's request sees the hold as used capacity (its GPUs in use), laid
  over the view with the in-flight reservations
  (:func:`cortex.knowledge.reservations.request_view`), so the capacity, GPU and
  NUMA filters steer it off that room;
- the owner's requests see the room free, and ``weigher_commitment`` sends them there;
- never twice: once the owner's instances sit on a host, Placement's usage counts them,
  so each owner instance on the host beyond those it had when the hold was made
  (``baseline``) consumes one hold there. This counts instances, not their sizes: an
  owner instance of another flavor on that host consumes a hold too (the promise is
  then under-kept, never over-counted), and while an owner instance that was already
  there when the hold was made is deleted, the holds count in full.
- a hold follows its instance: the sync binds each consuming instance to its hold
  (``instance_uuid``, :func:`cortex.store.commitments.follow_instances`); a bound hold
  is consumed wherever Nova moves or resizes its instance, its host following it, and
  is free again (on its last host) once the instance is gone.

An expired (or not yet started) commitment holds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cortex.knowledge.reservations import (
    Reservation,
    as_reservation,
    counted_holds,
    free_holds,
)

#: The holds' reckoning lives with the overlay that counts them
#: (:mod:`cortex.knowledge.reservations`); these names are the commitments' too.
__all__ = ["EARLIEST", "LATEST", "Commitment", "Hold", "as_reservation", "commitment_spec",
           "counted_holds", "free_holds", "overlapping_holds", "owner_room", "parse_time"]


@dataclass(frozen=True, slots=True)
class Hold:
    """One committed instance's room on ``host``: ``resources`` and predicted ``gpus``.

    ``baseline``: the owner's instances on the host when the hold was made;
    ``instance_uuid``: the owner's instance that took it (None while free).
    """

    id: str
    commitment_id: str
    host: str
    resources: Mapping[str, int]
    gpus: tuple[str, ...]
    baseline: int = 0
    instance_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class Commitment:
    """``count`` instances of one shape for ``project_id`` in ``availability_zone``.

    Shape: ``vcpus`` (dedicated when ``gpus``), ``memory_mb`` MiB, ``gpus`` passthrough
    GPUs of one of ``products`` (PCI product ids; empty: any model). Times are
    timezone-aware UTC; ``holds`` the room it got (fewer than ``count`` when the zone
    had no more).
    """

    id: str
    project_id: str
    availability_zone: str | None
    vcpus: int
    memory_mb: int
    gpus: int
    products: tuple[str, ...]
    count: int
    start_at: datetime
    end_at: datetime
    created_at: datetime
    description: str | None = None
    holds: tuple[Hold, ...] = ()

    def active(self, now: datetime) -> bool:
        """Whether it holds room at ``now``: ``start_at <= now < end_at``."""
        return self.start_at <= now < self.end_at

    def state(self, now: datetime) -> str:
        """``pending`` before its start, ``active``, ``expired`` after its end."""
        if now < self.start_at:
            return "pending"
        return "active" if now < self.end_at else "expired"


#: The earliest and latest times a commitment may start or end (UTC): what PostgreSQL's
#: ``timestamptz`` and Python's ``datetime`` (so every reader: the knowledge load, the
#: API, the CLI) both hold. PostgreSQL also holds years before 1 and after 9999.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def parse_time(text: str, name: str) -> datetime:
    """An ISO 8601 time (no zone: UTC) as UTC within :data:`EARLIEST`..:data:`LATEST`.

    ValueError naming ``name`` for a text that is not ISO 8601, or a time outside the
    range once its offset is applied (``0001-01-01T00:00:00+14:00`` is in year 0 UTC,
    ``9999-12-31T23:59:59-14:00`` in year 10000).
    """
    try:
        value = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # beyond year 1..9999 once the offset is applied
        utc = None
    if utc is None or not EARLIEST <= utc <= LATEST:
        raise ValueError(f"{name}: {text!r} is outside {EARLIEST:%Y-%m-%d} to "
                         f"{LATEST:%Y-%m-%d} (UTC)")
    return utc


def commitment_spec(body: Mapping[str, Any], now: datetime) -> Commitment:
    """What a schema-valid ``CommitmentCreate`` body asks for: no id and no holds yet.

    ``start_at`` defaults to ``now``; times as :func:`parse_time` reads them (its
    ValueError); product ids lower-cased; JSON Schema's integers (``8.0`` among them)
    made ints.
    """
    return Commitment(
        "", body["project_id"], body.get("availability_zone"), int(body["vcpus"]),
        int(body["memory_mb"]), int(body.get("gpus", 0)),
        tuple(p.lower() for p in body.get("products") or ()), int(body["count"]),
        parse_time(body["start_at"], "start_at") if body.get("start_at") else now,
        parse_time(body["end_at"], "end_at"), now, body.get("description"))


def overlapping_holds(commitments: Iterable[Commitment], hosts: Mapping[str, object],
                      start: datetime, end: datetime, now: datetime) -> list[Reservation]:
    """The free holds of every commitment whose period meets ``[start, end)``, as reservations.

    Whatever the project: what a new commitment for that period must not be given
    again. A commitment over by ``now`` holds nothing (its reservations would be expired).
    """
    return [as_reservation(h, c.created_at, c.end_at)
            for c in commitments if c.start_at < end and start < c.end_at and c.end_at > now
            for h in free_holds(c, hosts)]


def owner_room(commitments: Iterable[Commitment], hosts: Mapping[str, object],
               project_id: str | None, now: datetime) -> dict[str, int]:
    """``{host: free holds}`` of ``project_id``'s active commitments (its own room)."""
    room: dict[str, int] = {}
    for commitment in commitments:
        if commitment.active(now) and commitment.project_id == project_id:
            for hold in free_holds(commitment, hosts):
                room[hold.host] = room.get(hold.host, 0) + 1
    return room
