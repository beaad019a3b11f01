"""A kept promise is forgotten: the nova sync deletes the in-flight reservation of an
instance the servers show on the reservation's host (or on another host, not moving), so
that its room is not counted again once the instance is deleted (it would otherwise hold
until ``reservation_ttl``); a move still under way keeps its destination's reservation.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from cortex.db import models
from tests.sync.test_nova import nova

BOOTED = "00000000-0000-4000-8000-0000000000c1"
BUILDING = "00000000-0000-4000-8000-0000000000c2"
ELSEWHERE = "00000000-0000-4000-8000-0000000000c3"
MOVING = "00000000-0000-4000-8000-0000000000c4"


def reservation(id_: str, instance_uuid: str | None, group_id: str | None = None,
                host: str = "cmp0000") -> dict:
    now = datetime.now(UTC)
    return dict(id=id_, host=host, instance_uuid=instance_uuid, group_id=group_id,
                resources={"VCPU": 4}, gpus=[], created_at=now,
                expires_at=now + timedelta(hours=1))


def left(engine) -> list[str]:
    with engine.connect() as connection:
        return sorted(connection.execute(select(models.InflightReservation.id)).scalars())


def test_the_sync_deletes_the_promises_the_servers_keep(openstack, sync_engine,
                                                        sync_database_url):
    cloud = openstack.cloud
    for host in ("cmp0000", "cmp0001"):
        cloud.add_compute_host(host)
    cloud.add_server(BOOTED, "cmp0000")
    cloud.add_server(ELSEWHERE, "cmp0001")  # a create Nova placed on an alternate
    cloud.add_server(MOVING, "cmp0001", **{"OS-EXT-STS:task_state": "migrating"})
    with sync_engine.begin() as connection:
        connection.execute(models.InflightReservation.__table__.insert(), [
            reservation("r-booted", BOOTED), reservation("r-building", BUILDING),
            reservation("r-elsewhere", ELSEWHERE), reservation("r-moving", MOVING),
            reservation("r-slot", None, group_id="gang")])

    assert nova(sync_engine, openstack, sync_database_url).ok
    # still counting: the instance still building, the move under way (the instance on
    # its source, migrating to cmp0000) and the gang's unclaimed slot
    assert left(sync_engine) == ["r-building", "r-moving", "r-slot"]
