"""The API workers' in-memory reservations: fresh on NOTIFY, the table when not listening."""

import threading
import time
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from sqlalchemy import delete, event, insert, text

from cortex.api.metrics import ReservationFeedCollector
from cortex.db import models
from cortex.knowledge import reservation_store
from cortex.knowledge.reservation_feed import APPLICATION_NAME, TRIGGER
from cortex.knowledge.reservation_store import ReservationStore
from cortex.knowledge.reservations import Reservation

NOW = datetime.now(UTC)


def reservation(rid, host="h1", instance_uuid=None):
    return Reservation(rid, host, instance_uuid, None, MappingProxyType({"VCPU": 2}), (),
                       NOW, NOW + timedelta(seconds=300))


def eventually(predicate, timeout=10.0):
    """Whether ``predicate()`` became true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def postgres(engine):
    if engine.dialect.name != "postgresql":  # CI=true always runs these on PostgreSQL
        pytest.fail("the reservation feed needs PostgreSQL (LISTEN/NOTIFY)")
    return engine


@pytest.fixture
def feeding(postgres):
    """A store with the feed, live; the table emptied before and after."""
    with postgres.begin() as connection:
        connection.execute(delete(models.InflightReservation))
    store = ReservationStore(postgres, feed=True)
    store.active(NOW)  # starts the listener
    assert eventually(lambda: store._feed.current() is not None), "the feed never went live"
    assert store.refresh()
    yield store
    with postgres.begin() as connection:
        connection.execute(delete(models.InflightReservation))


def table_reads(store):
    """Reads of the table this thread issues through the store's pool (a list that grows)."""
    issued = []
    me = threading.get_ident()

    def count(conn, cursor, statement, *args):
        if threading.get_ident() == me and "FROM inflight_reservations" in statement:
            issued.append(statement)

    event.listen(store._engine, "before_cursor_execute", count)
    return issued


def listening_gauge(store):
    """``cortex_reservation_feed_listening`` as a scrape of this worker reports it."""
    (family,) = ReservationFeedCollector(store).collect()
    return family.samples[0].value


def write(engine, statement):
    """Change the table from outside the store, as another worker or an operator would."""
    with engine.begin() as connection:
        connection.execute(statement)


def row(rid, host="h9"):
    return {"id": rid, "host": host, "instance_uuid": None, "group_id": None,
            "resources": {"VCPU": 1}, "gpus": [], "created_at": NOW,
            "expires_at": NOW + timedelta(seconds=300)}


def test_a_change_from_outside_reaches_the_feed_without_reads_per_call(feeding, postgres):
    reads = table_reads(feeding)
    write(postgres, insert(models.InflightReservation).values(row("from-sql")))
    assert eventually(lambda: [r.id for r in feeding.active(NOW)] == ["from-sql"])
    write(postgres, text("UPDATE inflight_reservations SET host = 'h8'"))
    assert eventually(lambda: [r.host for r in feeding.active(NOW)] == ["h8"])
    write(postgres, delete(models.InflightReservation))
    assert eventually(lambda: list(feeding.active(NOW)) == [])
    assert reads == []  # every answer came from memory


def test_own_promises_count_at_once(feeding):
    made = feeding.promise("h1", NOW, lambda _: reservation("mine", instance_uuid="i1"))
    assert list(feeding.active(NOW)) == [made]
    again = feeding.promise("h2", NOW, lambda _: reservation("again", "h2", instance_uuid="i1"))
    assert list(feeding.active(NOW)) == [again]  # the same instance: replaced, as in the table


def test_without_its_connection_the_feed_hands_over_to_the_table(feeding, postgres):
    write(postgres, text(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE application_name = '{APPLICATION_NAME}' AND datname = current_database()"))
    assert eventually(lambda: feeding._feed.current() is None, 5), "still live"
    assert listening_gauge(feeding) == 0
    reads = table_reads(feeding)
    write(postgres, insert(models.InflightReservation).values(row("while-down")))
    assert [r.id for r in feeding.active(NOW)] == ["while-down"]
    assert len(reads) == 1  # read from the table (the feed retries after a second)
    assert eventually(lambda: feeding._feed.current() is not None), "the feed did not come back"
    assert feeding.refresh() and [r.id for r in feeding._feed.current()] == ["while-down"]
    assert listening_gauge(feeding) == 1


def test_a_database_without_the_trigger_is_read_on_every_call(postgres, monkeypatch):
    monkeypatch.setattr("cortex.knowledge.reservation_feed._TRIGGER",
                        "SELECT 1 WHERE false")  # as if migration 0007 had not run
    reservation_store._feed.cache_clear()
    try:
        store = ReservationStore(postgres, feed=True)
        store.active(NOW)
        time.sleep(0.5)
        assert store._feed.current() is None and listening_gauge(store) == 0
        reads = table_reads(store)
        store.active(NOW)
        assert len(reads) == 1
    finally:
        reservation_store._feed(postgres.url.render_as_string(hide_password=False), 3).stop()
        reservation_store._feed.cache_clear()


def test_the_trigger_exists_after_the_migrations(postgres):
    with postgres.connect() as connection:
        found = connection.execute(text("SELECT tgname FROM pg_trigger WHERE tgname = :name"),
                                   {"name": TRIGGER}).scalar()
    assert found == TRIGGER


def test_an_own_promise_announced_and_replaced_meanwhile_is_not_added_back(feeding,
                                                                          postgres):
    """add() comes after the commit; by then the stream may have moved past it."""
    first = reservation("first", instance_uuid="i7")
    write(postgres, insert(models.InflightReservation).values(
        row("first") | {"instance_uuid": "i7"}))
    write(postgres, delete(models.InflightReservation))
    assert feeding.refresh()
    feeding._feed.add(first)  # late: its insert and its delete were already applied
    assert list(feeding.active(NOW)) == []


def test_a_truncate_reloads(feeding, postgres):
    write(postgres, insert(models.InflightReservation).values(row("kept")))
    assert feeding.refresh() and [r.id for r in feeding.active(NOW)] == ["kept"]
    write(postgres, text("TRUNCATE inflight_reservations"))
    assert feeding.refresh() and list(feeding.active(NOW)) == []


def test_without_a_feed_there_is_no_gauge(engine):
    assert list(ReservationFeedCollector(ReservationStore(engine)).collect()) == []
