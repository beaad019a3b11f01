"""In-flight reservations kept in process memory, and the contract every store keeps.

:class:`MemoryReservations` is :class:`cortex.store.reservations.ReservationStore`
without a database: the simulator and one-process tests. Pure Python, so the simulator
may use it. Both hand out a :class:`HostLock` while they hold a host's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cortex.knowledge.reservations import Reservation, others_on


@dataclass
class HostLock:
    """A host's unexpired ``reservations``, read under its lock, and the one write allowed.

    :meth:`reserve` writes a reservation in the lock's transaction; ``made`` is it once
    written (the store commits it when the lock is released).
    """

    host: str
    reservations: list[Reservation]
    _write: Callable[[Reservation], None] = field(repr=False)
    made: Reservation | None = None

    def reserve(self, reservation: Reservation) -> None:
        """Write ``reservation`` (one per lock; RuntimeError for a second)."""
        if self.made is not None:
            raise RuntimeError(f"{self.host}: one reservation per lock")
        self._write(reservation)
        self.made = reservation


def reserve_if_unchanged(store: Any, made: Reservation, now: datetime,
                         expected: frozenset[str], own: str | None) -> bool:
    """Write ``made`` under its host's lock if the host's reservations are ``expected``.

    ``expected``: the ids of ``made.host``'s reservations unexpired at ``now``, those of
    instance ``own`` left out (``made`` replaces them). True when written; False,
    writing nothing, when the host has others now. ``store`` has ``lock_host``: this is
    the rule any store keeps, in two steps; :class:`cortex.store.reservations.ReservationStore`
    does it in one round trip on PostgreSQL.
    """
    with store.lock_host(made.host, now) as held:
        found = frozenset(r.id for r in others_on(held.reservations, made.host, own))
        if found != expected:
            return False
        held.reserve(made)
    return True


def rehearse(store: Any, made: Reservation, now: datetime) -> bool:
    """Judge ``made`` as a promise on an unchanged host would be, writing nothing.

    True when ``made.host`` has no reservation but instance ``made.instance_uuid``'s
    (the write would run). Takes and releases the host's lock: the rule any store
    keeps; :meth:`cortex.store.reservations.ReservationStore.rehearse` runs the
    write on PostgreSQL and rolls it back.
    """
    with store.lock_host(made.host, now) as held:
        return not others_on(held.reservations, made.host, made.instance_uuid)


class MemoryReservations:
    """Reservations in process memory: the simulator and single-process use.

    The contract of :class:`cortex.store.reservations.ReservationStore`: ``active(now)``,
    ``lock_host(host, now)``, ``reserve_if_unchanged(made, now, expected, own)`` and
    ``rehearse(made, now)``.
    """

    def __init__(self) -> None:
        self._items: dict[str, Reservation] = {}
        self._lock = threading.Lock()

    def active(self, now: datetime) -> list[Reservation]:
        """Unexpired reservations (expired ones are dropped)."""
        with self._lock:
            for key in [k for k, r in self._items.items() if r.expires_at <= now]:
                del self._items[key]
            return list(self._items.values())

    @contextmanager
    def lock_host(self, host: str, now: datetime) -> Iterator[HostLock]:
        """Hold the store's lock; yield the unexpired reservations (see ReservationStore)."""
        with self._lock:
            current = [r for r in self._items.values() if r.expires_at > now]
            yield HostLock(host, current, self._replace)

    def reserve_if_unchanged(self, made: Reservation, now: datetime,
                             expected: frozenset[str], own: str | None) -> bool:
        """See :func:`reserve_if_unchanged`."""
        return reserve_if_unchanged(self, made, now, expected, own)

    def rehearse(self, made: Reservation, now: datetime) -> bool:
        """See :func:`rehearse`."""
        return rehearse(self, made, now)

    def _replace(self, reservation: Reservation) -> None:
        """Store ``reservation``, dropping an earlier one of the same instance."""
        if reservation.instance_uuid:
            for key in [k for k, r in self._items.items()
                        if r.instance_uuid == reservation.instance_uuid]:
                del self._items[key]
        self._items[reservation.id] = reservation

    def drop(self, instance_uuids: Iterable[str]) -> None:
        """Forget the reservations of these instances (the simulator deleted them)."""
        gone = set(instance_uuids)
        with self._lock:
            for key in [k for k, r in self._items.items() if r.instance_uuid in gone]:
                del self._items[key]
