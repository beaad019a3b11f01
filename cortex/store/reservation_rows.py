"""The ``inflight_reservations`` rows as reservations, and the advisory locks' namespace.

Shared by the reservation store (:mod:`cortex.store.reservations`) and the group
promises (:mod:`cortex.store.group_promises`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, delete, exists, or_

from cortex.db import models
from cortex.knowledge.reservations import MOVING_TASK_STATES, Reservation

#: First key of the advisory lock, so that Cortex's host locks never meet another
#: user's (the sync leader lock uses its own key).
LOCK_NAMESPACE = 0x434F5258 & 0x7FFFFFFF


def aware(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; every time here is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def reservation_of(row: Any) -> Reservation:
    """Reservation of an ``inflight_reservations`` row."""
    return Reservation(row.id, row.host, row.instance_uuid, row.group_id,
                       MappingProxyType({k: int(v) for k, v in (row.resources or {}).items()}),
                       tuple(row.gpus or ()), aware(row.created_at), aware(row.expires_at))


def row_of(reservation: Reservation) -> dict[str, Any]:
    """The ``inflight_reservations`` row of ``reservation``."""
    return {"id": reservation.id, "host": reservation.host,
            "instance_uuid": reservation.instance_uuid, "group_id": reservation.group_id,
            "resources": dict(reservation.resources), "gpus": list(reservation.gpus),
            "created_at": reservation.created_at, "expires_at": reservation.expires_at}


def delete_fulfilled(connection: Connection) -> int:
    """Delete the reservations the synced servers keep; their count.

    Kept as :func:`cortex.knowledge.reservations.kept` says: the instance shows on the
    reservation's host, or on another one and not moving. Placement holds its usage then,
    and a row left behind would count again once the instance is deleted (it is then on
    no host) and hold its room until it expires. Unclaimed group slots (no instance) and
    moves still under way stay. Runs in the sync's transaction, after the servers.
    """
    rows, servers = models.InflightReservation, models.Server
    keeping = exists().where(
        servers.uuid == rows.instance_uuid, servers.host.is_not(None),
        or_(servers.host == rows.host, servers.task_state.is_(None),
            servers.task_state.not_in(sorted(MOVING_TASK_STATES))))
    return connection.execute(delete(rows).where(keeping)).rowcount or 0
