"""In-flight reservations kept in process memory, and the contract every store keeps.

:class:`MemoryReservations` is :class:`cortex.store.reservations.ReservationStore`
without a database: the simulator and one-process tests. Pure Python, so the simulator
may use it. Both hand out a :class:`HostLock` while they hold a host's lock, and keep
group promises (:class:`GroupPromise`, handed out under a :class:`GroupLock`):
:class:`MemoryGroupPromises` here, :mod:`cortex.store.group_promises` in the database.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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


@dataclass(frozen=True)
class GroupPromise:
    """One group's promise: ``members`` asked, ``placed`` promised (at least ``min_count``).

    ``hosts`` and ``reservations`` (ids of ``inflight_reservations`` rows) in member
    order; times timezone-aware UTC.
    """

    key: str
    service: str
    members: int
    placed: int
    min_count: int
    hosts: tuple[str, ...]
    reservations: tuple[str, ...]
    created_at: datetime
    expires_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``GET /v1/reservations``, the decision record)."""
        return {"key": self.key, "service": self.service, "members": self.members,
                "placed": self.placed, "min_count": self.min_count, "hosts": list(self.hosts),
                "reservations": list(self.reservations),
                "created_at": self.created_at.isoformat(),
                "expires_at": self.expires_at.isoformat()}


@dataclass
class GroupLock:
    """What :meth:`GroupPromiseStore.lock` read under its locks, and the one write allowed.

    ``existing``: the group's unexpired promise (another call made it: nothing may be
    written); ``reservations``: the unexpired reservations on the locked hosts.
    """

    key: str
    existing: GroupPromise | None
    reservations: list[Reservation]
    _write: Callable[[GroupPromise, list[Reservation]], None] = field(repr=False)
    made: GroupPromise | None = None
    written: list[Reservation] = field(default_factory=list)

    def promise(self, service: str, members: int, min_count: int,
                placed: list[Reservation]) -> GroupPromise:
        """Write the group's promise of ``members`` (``placed``: their reservations).

        Once, and not over ``existing`` (RuntimeError). The promise's hosts, ids and
        times are the reservations' (member order); returns it.
        """
        if self.made is not None or self.existing is not None or not placed:
            raise RuntimeError(f"group {self.key}: already promised, or nothing to promise")
        group = GroupPromise(self.key, service, members, len(placed), min_count,
                             tuple(r.host for r in placed), tuple(r.id for r in placed),
                             placed[0].created_at, placed[0].expires_at)
        self._write(group, placed)
        self.made, self.written = group, list(placed)
        return group


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

    def __init__(self, groups: bool = True) -> None:
        """``groups``: keep group promises (False: every group is promised member by member)."""
        self._items: dict[str, Reservation] = {}
        self._lock = threading.RLock()
        self._groups = MemoryGroupPromises(self) if groups else None

    def groups(self) -> MemoryGroupPromises | None:
        """The group promises beside these reservations; None when it keeps none."""
        return self._groups

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


class MemoryGroupPromises:
    """Group promises in process memory, beside a :class:`MemoryReservations`.

    The contract of :class:`cortex.store.group_promises.GroupPromiseStore`, every step
    under the reservations' one lock.
    """

    def __init__(self, reservations: MemoryReservations) -> None:
        self._store = reservations
        self._groups: dict[str, GroupPromise] = {}

    def _read(self, key: str, now: datetime) -> GroupPromise | None:
        """Group ``key``'s promise while unexpired and some of its reservations are left."""
        group = self._groups.get(key)
        items = self._store._items
        if group is None or group.expires_at <= now or not any(
                i in items and items[i].expires_at > now for i in group.reservations):
            return None
        return group

    def find(self, key: str, now: datetime) -> GroupPromise | None:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.find`."""
        with self._store._lock:
            return self._read(key, now)

    def find_with_slots(self, key: str, now: datetime
                        ) -> tuple[GroupPromise | None, list[Reservation]]:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.find_with_slots`."""
        with self._store._lock:
            group = self._read(key, now)
            return (group, self.slots(group, now)) if group is not None else (None, [])

    @contextmanager
    def lock(self, key: str, hosts: Iterable[str], now: datetime) -> Iterator[GroupLock]:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.lock`."""
        wanted = set(hosts)
        with self._store._lock:
            current = [r for r in self._store._items.values()
                       if r.host in wanted and r.expires_at > now]

            def write(group: GroupPromise, members: list[Reservation]) -> None:
                for member in members:
                    self._store._replace(member)
                self._groups[group.key] = group

            yield GroupLock(key, self._read(key, now), current, write)

    def claim(self, group: GroupPromise, slot: str, instance_uuid: str | None,
              now: datetime) -> Reservation | None:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.claim`."""
        with self._store._lock:
            found = self._store._items.get(slot)
            if found is None or found.instance_uuid is not None or found.expires_at <= now:
                return None
            claimed = replace(found, instance_uuid=instance_uuid)
            self._store._replace(claimed)
            return claimed

    def slots(self, group: GroupPromise, now: datetime) -> list[Reservation]:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.slots`."""
        with self._store._lock:
            items = self._store._items
            return [items[i] for i in group.reservations
                    if i in items and items[i].expires_at > now]

    def release(self, group: GroupPromise, slot: str) -> bool:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.release`."""
        with self._store._lock:
            found = self._store._items.get(slot)
            if found is None or found.instance_uuid is not None:
                return False
            del self._store._items[slot]
            return True

    def active(self, now: datetime) -> list[GroupPromise]:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.active`."""
        with self._store._lock:
            return sorted((g for g in self._groups.values() if g.expires_at > now),
                          key=lambda g: g.created_at)

    def reservations(self, now: datetime) -> list[Reservation]:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.reservations`."""
        return self._store.active(now)

    def prune(self, now: datetime) -> list[tuple[GroupPromise, int]]:
        """See :meth:`cortex.store.group_promises.GroupPromiseStore.prune`."""
        with self._store._lock:
            gone = [g for g in self._groups.values() if g.expires_at <= now]
            pruned = []
            for group in gone:
                del self._groups[group.key]
                unclaimed = sum(1 for i in group.reservations if i in self._store._items
                                and self._store._items[i].instance_uuid is None)
                pruned.append((group, unclaimed))
            return pruned
