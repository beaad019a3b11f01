"""In-flight reservations in the database: promised once under concurrency, counted until seen."""

import dataclasses
import threading
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from sqlalchemy import delete

from cortex.db import models
from cortex.db.engine import make_engine
from cortex.db.migrate import upgrade
from cortex.knowledge.reservation_store import ReservationStore
from cortex.knowledge.reservations import Reservation, with_reservations
from tests.fakes import host, instance, inventory, view

NOW = datetime.now(UTC)


def reservation(rid, host_name="h1", instance_uuid=None, vcpus=4, ttl=300, group=None):
    return Reservation(rid, host_name, instance_uuid, group, MappingProxyType({"VCPU": vcpus}),
                       ("0000:17:00.0",), NOW, NOW + timedelta(seconds=ttl))


@pytest.fixture
def store(engine):
    yield ReservationStore(engine)
    with engine.begin() as connection:
        connection.execute(delete(models.InflightReservation))


def race(store, threads, room):
    """``threads`` concurrent promises on one host that has room for ``room``; those made."""
    barrier = threading.Barrier(threads)
    made = []

    def one(i):
        barrier.wait()
        got = store.promise("h1", NOW, lambda current: reservation(f"r{i:02d}", instance_uuid=
                                                                    f"i{i:02d}")
                            if len(current) < room else None)
        if got is not None:
            made.append(got)

    workers = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    return made


def test_fifty_concurrent_promises_never_exceed_the_room(store, engine):
    made = race(store, 50, 3)
    assert len(made) == 3
    assert len(store.active(NOW)) == 3


def test_sqlite_serialises_promises_in_one_process(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'r.sqlite'}")
    upgrade(engine)
    sqlite_store = ReservationStore(engine)
    assert len(race(sqlite_store, 20, 2)) == 2
    assert {r.host for r in sqlite_store.active(NOW)} == {"h1"}
    engine.dispose()


def test_a_new_answer_for_the_same_instance_replaces_the_old(store):
    store.promise("h1", NOW, lambda _: reservation("a", "h1", "i1"))
    store.promise("h2", NOW, lambda _: reservation("b", "h2", "i1"))
    assert [(r.id, r.host) for r in store.active(NOW)] == [("b", "h2")]


def test_refused_promises_write_nothing_and_expired_ones_are_pruned(store):
    assert store.promise("h1", NOW, lambda _: None) is None
    store.promise("h1", NOW, lambda _: reservation("old", ttl=-1))
    store.promise("h1", NOW, lambda _: reservation("new"))
    assert [r.id for r in store.active(NOW)] == ["new"]
    assert store.prune(NOW) == 1
    stored = store.active(NOW)[0]
    assert stored.gpus == ("0000:17:00.0",) and stored.resources == {"VCPU": 4}
    assert stored.expires_at.tzinfo is not None


def test_reservations_count_until_the_instance_shows_up():
    base = view(host("h1", inventories={"VCPU": inventory(16, used=4)}))
    held = [reservation("a", instance_uuid="i1"), reservation("b", instance_uuid="i2"),
            reservation("c", instance_uuid="i3", ttl=-5)]
    overlaid = with_reservations(base, held, NOW)
    assert overlaid.hosts["h1"].nodes["h1.cloud.example"].inventories["VCPU"].used == 12
    assert {r.id for r in overlaid.reservations} == {"a", "b"}
    synced = dataclasses.replace(base, hosts=MappingProxyType(
        {"h1": dataclasses.replace(base.hosts["h1"], instances=(instance("i1"),))}))
    seen = with_reservations(synced, held, NOW)
    assert seen.hosts["h1"].nodes["h1.cloud.example"].inventories["VCPU"].used == 8
    assert {r.id for r in seen.reservations} == {"a", "b"}  # still tells the group
    again = with_reservations(base, held, NOW, instance_uuid="i2")
    assert again.hosts["h1"].nodes["h1.cloud.example"].inventories["VCPU"].used == 8


def test_capacity_filter_sees_an_overlay_after_the_synced_view_was_judged():
    from cortex.plugins.filters.has_enough_capacity import HasEnoughCapacityFilter
    from tests.fakes import nova

    room = {"VCPU": inventory(16, used=4), "MEMORY_MB": inventory(65536),
            "DISK_GB": inventory(1000)}
    base = view(host("h1", inventories=room), host("h2", inventories=room))
    request = nova(hosts=["h1", "h2"], flavor={"vcpus": 8, "memory_mb": 1024, "root_gb": 10})
    capacity = HasEnoughCapacityFilter()

    def judged(v):
        pairs = [(c, v.hosts[c.host]) for c in request.candidates]
        return capacity.check_all(pairs, request, v)

    assert judged(base) == {}  # builds the synced view's free-capacity table
    overlaid = with_reservations(base, [reservation("a", "h1", vcpus=8)], NOW)
    assert overlaid.root is base
    assert set(judged(overlaid)) == {"h1"}
    assert judged(base) == {}
