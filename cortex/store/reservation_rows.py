"""The ``inflight_reservations`` rows as reservations, and the advisory locks' namespace.

Shared by the reservation store (:mod:`cortex.store.reservations`) and the group
promises (:mod:`cortex.store.group_promises`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, delete, select

from cortex.db import models
from cortex.knowledge.reservations import Reservation

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
    """Delete the reservations whose instance the synced servers show on a host; their count.

    Placement holds such an instance's usage, so its promise is kept and done. A row left
    behind would count again once the instance is deleted (it is then in no host's
    instances) and hold its room until it expires. Unclaimed group slots (no instance)
    stay. Runs in the sync's transaction, after the servers are written.
    """
    servers = select(models.Server.uuid).where(models.Server.host.is_not(None))
    return connection.execute(delete(models.InflightReservation).where(
        models.InflightReservation.instance_uuid.in_(servers))).rowcount or 0
