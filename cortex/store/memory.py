"""In-flight reservations kept in process memory: the simulator and one-process tests.

The same contract as :class:`cortex.store.reservations.ReservationStore`, without a
database; pure Python, so the simulator may use it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime

from cortex.knowledge.reservations import Reservation


class MemoryReservations:
    """Reservations in process memory: the simulator and single-process use.

    ``promise(host, make, check)`` is the store's contract: under the host's lock, the
    pending reservations are passed to ``check(reservations)``, which answers the
    Reservation to add (or None to refuse); see
    :class:`cortex.store.reservations.ReservationStore`.
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

    def promise(self, host: str, now: datetime, check) -> Reservation | None:
        """Add ``check(current reservations)``'s Reservation atomically; None when refused."""
        with self._lock:
            current = [r for r in self._items.values() if r.expires_at > now]
            reservation = check(current)
            if reservation is None:
                return None
            self._replace(reservation)
            return reservation

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
