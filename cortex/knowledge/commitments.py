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
  (:func:`cortex.knowledge.reservations.with_reservations`), so the capacity, GPU and
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
from datetime import datetime

from cortex.knowledge.reservations import Reservation


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


def free_holds(commitment: Commitment, hosts: Mapping[str, object]) -> list[Hold]:
    """The holds of ``commitment`` its owner's instances have not consumed yet.

    ``hosts``: the synced view's host states (their ``instances`` with project ids).
    A hold bound to an instance is consumed; per host, each owner instance beyond the
    free holds' ``baseline`` and not bound to a hold consumes one more.
    """
    bound = {h.instance_uuid for h in commitment.holds if h.instance_uuid}
    by_host: dict[str, list[Hold]] = {}
    for hold in commitment.holds:
        if not hold.instance_uuid:
            by_host.setdefault(hold.host, []).append(hold)
    free = []
    for host, holds in by_host.items():
        state = hosts.get(host)
        owned = sum(1 for i in getattr(state, "instances", ())
                    if i.project_id == commitment.project_id and i.uuid not in bound)
        consumed = min(len(holds), max(0, owned - max(h.baseline for h in holds)))
        free.extend(holds[consumed:])
    return free


def counted_holds(commitments: Iterable[Commitment], hosts: Mapping[str, object],
                  project_id: str | None, now: datetime) -> list[Reservation]:
    """The free holds of active commitments of other projects, as reservations.

    Laid over a view with :func:`cortex.knowledge.reservations.with_reservations`; each
    expires with its commitment and names no instance (it stays counted).
    """
    return [Reservation(f"hold-{h.id}", h.host, None, None, h.resources, h.gpus,
                        c.created_at, c.end_at)
            for c in commitments if c.active(now) and c.project_id != project_id
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
