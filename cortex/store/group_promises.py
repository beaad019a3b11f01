"""Group promises in the database: a gang's room held whole, in one transaction.

A group promise is one ``group_promises`` row (the group's key, the members asked and
promised, their hosts, expiry) and one ``inflight_reservations`` row per member promised
(:mod:`cortex.store.reservations`): those rows count in every later call's view exactly
as a single promise does. A member's row carries its instance uuid once a member took it;
until then the slot has none and waits for the next member's call.

:meth:`GroupPromiseStore.lock` is the one place a group's room is promised: in one
transaction it takes the advisory locks of the group's key and of every host the plan
names (the same per-host locks as :meth:`ReservationStore.lock_host`, taken in the
order of their lock keys so that two groups never wait for each other in a cycle),
reads the group's row and the hosts' unexpired reservations; the scheduler re-checks
its plan with them (:mod:`cortex.scheduler.promise`) and writes the whole group or
nothing. :meth:`GroupPromiseStore.claim` hands a later member a slot in one short
transaction: the row's update takes it only while no member has. The embedded SQLite
default serves one process: the reservation store's process lock serialises the group
promise instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, text, update

from cortex.db import models
from cortex.db.guard import bound_lock_waits
from cortex.knowledge.reservations import Reservation
from cortex.store.memory import GroupLock, GroupPromise
from cortex.store.reservation_rows import LOCK_NAMESPACE
from cortex.store.reservation_rows import aware as _aware
from cortex.store.reservation_rows import reservation_of as _reservation
from cortex.store.reservation_rows import row_of as _values

_GROUPS = models.GroupPromise
_RESERVATIONS = models.InflightReservation
_LOCK_KEYS = text("SELECT DISTINCT hashtext(h) AS k FROM unnest(CAST(:names AS text[])) AS h "
                  "ORDER BY k")
_LOCK = text("SELECT pg_advisory_xact_lock(:ns, :key)")


def group_lock_name(key: str) -> str:
    """The name whose advisory lock guards group ``key`` (hosts use their own name)."""
    return f"group:{key}"


def _group(row: Any) -> GroupPromise:
    """The GroupPromise of a ``group_promises`` row."""
    return GroupPromise(row.id, row.service, row.members, row.placed, row.min_count,
                        tuple(row.hosts), tuple(row.reservations), _aware(row.created_at),
                        _aware(row.expires_at))


class GroupPromiseStore:
    """Group promises next to the in-flight reservations of ``reservations``' database.

    Shares the reservation store's engine (its pool of connections), its process lock
    (SQLite) and its feed (a worker's in-memory reservations learn the group's rows at
    once, before the NOTIFY comes back).
    """

    def __init__(self, reservations: Any) -> None:
        self._store = reservations
        self._engine = reservations.engine
        self._postgres = self._engine.dialect.name == "postgresql"

    @contextmanager
    def _transaction(self, names: Iterable[str]) -> Iterator[Connection]:
        """One transaction holding the advisory locks of ``names`` (SQLite: the process lock)."""
        local = nullcontext() if self._postgres else self._store.process_lock
        with local, self._engine.begin() as connection:
            if self._postgres:
                keys = connection.execute(_LOCK_KEYS, {"names": sorted(set(names))}).scalars()
                for key in list(keys):
                    bound_lock_waits(connection)  # lock_timeout bounds each wait alone
                    connection.execute(_LOCK, {"ns": LOCK_NAMESPACE, "key": key})
            yield connection

    @staticmethod
    def _read_group(connection: Connection, key: str, now: datetime) -> GroupPromise | None:
        """Group ``key``'s promise, None when expired or when none of its reservations is left.

        A promise whose every reservation is gone (pruned, or each member promised
        elsewhere since) holds nothing: the group is placed anew.
        """
        row = connection.execute(select(_GROUPS).where(_GROUPS.id == key)).first()
        if row is None or _aware(row.expires_at) <= now:
            return None
        group = _group(row)
        left = connection.execute(select(_RESERVATIONS.id).where(
            _RESERVATIONS.id.in_(group.reservations), _RESERVATIONS.expires_at > now)
            .limit(1)).first()
        return group if left is not None else None

    def find(self, key: str, now: datetime) -> GroupPromise | None:
        """Group ``key``'s promise unexpired at ``now``, None when there is none."""
        with self._engine.connect() as connection:
            return self._read_group(connection, key, now)

    def find_with_slots(self, key: str, now: datetime
                        ) -> tuple[GroupPromise | None, list[Reservation]]:
        """:meth:`find` and :meth:`slots` in one connection: ``(promise, its slots)``.

        ``(None, [])`` when there is no promise, or none of its reservations is left.
        """
        with self._engine.connect() as connection:
            row = connection.execute(select(_GROUPS).where(_GROUPS.id == key)).first()
            if row is None or _aware(row.expires_at) <= now:
                return None, []
            group = _group(row)
            found = self._slots(connection, group, now)
        return (group, found) if found else (None, [])

    @staticmethod
    def _slots(connection: Connection, group: GroupPromise, now: datetime) -> list[Reservation]:
        """The group's reservations unexpired at ``now``, in member order."""
        rows = {r.id: _reservation(r) for r in connection.execute(select(_RESERVATIONS).where(
            _RESERVATIONS.id.in_(group.reservations), _RESERVATIONS.expires_at > now))}
        return [rows[i] for i in group.reservations if i in rows]

    @contextmanager
    def lock(self, key: str, hosts: Iterable[str], now: datetime) -> Iterator[GroupLock]:
        """Hold group ``key``'s and ``hosts``' locks in one transaction; yield what they guard.

        The block decides, then calls :meth:`GroupLock.promise` to write the group and
        every member's reservation, which commit when the block ends; a block that does
        not promise, or raises, writes nothing. An expired promise of the same key is
        replaced. Raises SQLAlchemyError when the database fails.
        """
        hosts = sorted(set(hosts))
        with self._transaction([group_lock_name(key), *hosts]) as connection:
            existing = self._read_group(connection, key, now)
            rows = connection.execute(select(_RESERVATIONS).where(
                _RESERVATIONS.host.in_(hosts), _RESERVATIONS.expires_at > now)).all()

            def write(group: GroupPromise, members: list[Reservation]) -> None:
                connection.execute(delete(_GROUPS).where(_GROUPS.id == group.key))
                owned = [m.instance_uuid for m in members if m.instance_uuid]
                if owned:  # the same instance asking again: the group's row replaces it
                    connection.execute(delete(_RESERVATIONS).where(
                        _RESERVATIONS.instance_uuid.in_(owned)))
                connection.execute(insert(_RESERVATIONS), [_values(m) for m in members])
                connection.execute(insert(_GROUPS).values(
                    id=group.key, service=group.service, members=group.members,
                    placed=group.placed, min_count=group.min_count, hosts=list(group.hosts),
                    reservations=list(group.reservations), created_at=group.created_at,
                    expires_at=group.expires_at))

            held = GroupLock(key, existing, [_reservation(r) for r in rows], write)
            yield held
            if held.made is None:
                connection.rollback()
        if held.made is not None:
            self._store.announce(*held.written)

    def claim(self, group: GroupPromise, slot: str, instance_uuid: str | None,
              now: datetime) -> Reservation | None:
        """Give the member ``instance_uuid`` the group's unclaimed reservation ``slot``.

        One transaction, no lock: the slot's room is counted on its host already, and
        the row's update takes it only while it is unexpired and untaken (a concurrent
        claim of the same slot waits for the row and then finds it taken). An earlier
        reservation of the same instance is dropped (the slot replaces it). The
        reservation as claimed, or None (writing nothing) when the slot is gone or taken.
        """
        with self._engine.connect() as connection, connection.begin() as transaction:
            if instance_uuid:
                connection.execute(delete(_RESERVATIONS).where(
                    _RESERVATIONS.instance_uuid == instance_uuid, _RESERVATIONS.id != slot))
            row = connection.execute(
                update(_RESERVATIONS).where(_RESERVATIONS.id == slot,
                                            _RESERVATIONS.instance_uuid.is_(None),
                                            _RESERVATIONS.expires_at > now)
                .values(instance_uuid=instance_uuid)
                .returning(*_RESERVATIONS.__table__.columns)).first()
            if row is None:
                transaction.rollback()
                return None
            claimed = _reservation(row)
        self._store.announce(claimed)
        return claimed

    def slots(self, group: GroupPromise, now: datetime) -> list[Reservation]:
        """The group's reservations unexpired at ``now``, in member order."""
        with self._engine.connect() as connection:
            return self._slots(connection, group, now)

    def release(self, group: GroupPromise, slot: str) -> bool:
        """Free the group's unclaimed reservation ``slot`` (its member went elsewhere)."""
        with self._transaction([group_lock_name(group.key)]) as connection:
            gone = connection.execute(delete(_RESERVATIONS).where(
                _RESERVATIONS.id == slot, _RESERVATIONS.instance_uuid.is_(None))).rowcount
        return bool(gone)

    def active(self, now: datetime) -> list[GroupPromise]:
        """Every group promise unexpired at ``now``, oldest first."""
        with self._engine.connect() as connection:
            rows = connection.execute(select(_GROUPS).where(_GROUPS.expires_at > now)
                                      .order_by(_GROUPS.created_at)).all()
        return [_group(r) for r in rows]

    def reservations(self, now: datetime) -> list[Reservation]:
        """Every reservation unexpired at ``now``, read from the table (never the feed)."""
        with self._engine.connect() as connection:
            rows = connection.execute(select(_RESERVATIONS).where(
                _RESERVATIONS.expires_at > now)).all()
        return [_reservation(r) for r in rows]

    def prune(self, now: datetime) -> list[tuple[GroupPromise, int]]:
        """Delete the group promises expired at ``now``: each, and its slots no member took.

        Each row is deleted by one caller only (``DELETE ... RETURNING``), so concurrent
        workers never report the same promise twice. The slots are counted among the
        group's reservations still stored (an expired reservation is deleted by
        :meth:`ReservationStore.prune`; until then it is counted here).
        """
        pruned = []
        with self._engine.begin() as connection:
            rows = connection.execute(delete(_GROUPS).where(_GROUPS.expires_at <= now)
                                      .returning(*_GROUPS.__table__.columns)).all()
            for row in rows:
                group = _group(row)
                unclaimed = len(connection.execute(select(_RESERVATIONS.id).where(
                    _RESERVATIONS.id.in_(group.reservations),
                    _RESERVATIONS.instance_uuid.is_(None))).all())
                pruned.append((group, unclaimed))
        return pruned

