"""A kept promise is forgotten: the nova sync deletes the in-flight reservation of an
instance the servers show on a host, so that its room is not counted again once the
instance is deleted (it would otherwise hold until ``reservation_ttl``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from cortex.db import models
from tests.sync.test_nova import nova

BOOTED = "00000000-0000-4000-8000-0000000000c1"
BUILDING = "00000000-0000-4000-8000-0000000000c2"


def reservation(id_: str, instance_uuid: str | None, group_id: str | None = None) -> dict:
    now = datetime.now(UTC)
    return dict(id=id_, host="cmp0000", instance_uuid=instance_uuid, group_id=group_id,
                resources={"VCPU": 4}, gpus=[], created_at=now,
                expires_at=now + timedelta(hours=1))


def kept(engine) -> list[str]:
    with engine.connect() as connection:
        return sorted(connection.execute(select(models.InflightReservation.id)).scalars())


def test_the_promise_of_an_instance_the_servers_show_is_deleted(openstack, sync_engine,
                                                                 sync_database_url):
    openstack.cloud.add_compute_host("cmp0000")
    openstack.cloud.add_server(BOOTED, "cmp0000")
    with sync_engine.begin() as connection:
        connection.execute(models.InflightReservation.__table__.insert(), [
            reservation("r-booted", BOOTED), reservation("r-building", BUILDING),
            reservation("r-slot", None, group_id="gang")])

    assert nova(sync_engine, openstack, sync_database_url).ok
    # the booted instance's promise is kept; the one still building and the gang's
    # unclaimed slot still count
    assert kept(sync_engine) == ["r-building", "r-slot"]
