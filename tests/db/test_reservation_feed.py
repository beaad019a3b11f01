"""The API workers' in-memory reservations: fresh on NOTIFY, the table when not listening."""

import logging
import threading
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest
from sqlalchemy import delete, event, insert, text
from sqlalchemy.engine import make_url

from cortex.api.metrics import ReservationFeedCollector
from cortex.db import models
from cortex.knowledge.reservations import Reservation
from cortex.store import reservations as reservation_store
from cortex.store.reservation_feed import APPLICATION_NAME, TRIGGER
from cortex.store.reservations import ReservationStore
from tests.fakes import promise
from tests.waiting import DEADLINE, eventually

#: How long the rows of these tests live. The feed loads and sweeps by the real clock,
#: so they must outlive the test by far; the times come from the ``now`` fixture, read
#: when the test starts, never at import (a file that starts late would find its rows
#: expired, and the feed would drop them).
TTL = timedelta(hours=1)


@pytest.fixture
def now():
    return datetime.now(UTC)


def reservation(rid, now, host="h1", instance_uuid=None):
    return Reservation(rid, host, instance_uuid, None, MappingProxyType({"VCPU": 2}), (),
                       now, now + TTL)


@pytest.fixture
def postgres(engine):
    if engine.dialect.name != "postgresql":  # CI=true always runs these on PostgreSQL
        pytest.fail("the reservation feed needs PostgreSQL (LISTEN/NOTIFY)")
    return engine


@pytest.fixture
def feeding(postgres, now):
    """A store with the feed, live; the table emptied before and after."""
    with postgres.begin() as connection:
        connection.execute(delete(models.InflightReservation))
    store = ReservationStore(postgres, feed=True)
    store.active(now)  # starts the listener
    assert eventually(lambda: store._feed.current() is not None), "the feed never went live"
    assert store.refresh(DEADLINE)
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


def row(rid, now, host="h9"):
    return {"id": rid, "host": host, "instance_uuid": None, "group_id": None,
            "resources": {"VCPU": 1}, "gpus": [], "created_at": now, "expires_at": now + TTL}


def test_a_change_from_outside_reaches_the_feed_without_reads_per_call(feeding, postgres, now):
    reads = table_reads(feeding)
    write(postgres, insert(models.InflightReservation).values(row("from-sql", now)))
    assert eventually(lambda: [r.id for r in feeding.active(now)] == ["from-sql"])
    write(postgres, text("UPDATE inflight_reservations SET host = 'h8'"))
    assert eventually(lambda: [r.host for r in feeding.active(now)] == ["h8"])
    write(postgres, delete(models.InflightReservation))
    assert eventually(lambda: list(feeding.active(now)) == [])
    assert reads == []  # every answer came from memory


def test_own_promises_count_at_once(feeding, now):
    made = promise(feeding, "h1", now, lambda _: reservation("mine", now, instance_uuid="i1"))
    assert list(feeding.active(now)) == [made]
    # The first promise's own NOTIFY applied before the second: applied after it, it
    # would briefly put "mine" back in place of "again" (a later change of the same
    # instance); what this test checks is the count before any NOTIFY came back.
    assert feeding.refresh(DEADLINE)
    again = promise(feeding, "h2", now, lambda _: reservation("again", now, "h2",
                                                             instance_uuid="i1"))
    assert list(feeding.active(now)) == [again]  # the same instance: replaced, as in the table


def test_without_its_connection_the_feed_hands_over_to_the_table(feeding, postgres, now,
                                                                monkeypatch):
    # The feed retries a second after losing its connection; held here at its reload
    # until the test has seen the table read, however long the test takes to get there.
    back = threading.Event()
    load = feeding._feed._load
    monkeypatch.setattr(feeding._feed, "_load", lambda: (back.wait(DEADLINE), load())[1])
    try:
        write(postgres, text(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = '{APPLICATION_NAME}' AND datname = current_database()"))
        assert eventually(lambda: feeding._feed.current() is None), "still live"
        assert listening_gauge(feeding) == 0
        reads = table_reads(feeding)
        write(postgres, insert(models.InflightReservation).values(row("while-down", now)))
        assert [r.id for r in feeding.active(now)] == ["while-down"]
        assert len(reads) == 1  # read from the table
    finally:
        back.set()
    assert eventually(lambda: feeding._feed.current() is not None), "the feed did not come back"
    assert feeding.refresh(DEADLINE) and [r.id for r in feeding._feed.current()] == ["while-down"]
    assert listening_gauge(feeding) == 1


def test_a_database_without_the_trigger_is_read_on_every_call(postgres, monkeypatch, caplog,
                                                              now):
    monkeypatch.setattr("cortex.store.reservation_feed._TRIGGER",
                        "SELECT 1 WHERE false")  # as if migration 0007 had not run
    url = postgres.url.render_as_string(hide_password=False)
    reservation_store._feed(url, 3).stop()  # the other tests' feed: a new one for this test
    reservation_store._feed.cache_clear()
    caplog.set_level(logging.WARNING, "cortex.store.reservation_feed")
    try:
        store = ReservationStore(postgres, feed=True)
        store.active(now)

        def looked_for_the_trigger():
            return any("no trigger" in r.getMessage() and r.thread == store._feed._thread.ident
                       for r in caplog.records)

        assert eventually(looked_for_the_trigger), "the feed never looked for the trigger"
        assert store._feed.current() is None and listening_gauge(store) == 0
        reads = table_reads(store)
        store.active(now)
        assert len(reads) == 1
    finally:
        reservation_store._feed(url, 3).stop()
        reservation_store._feed.cache_clear()


def test_the_trigger_exists_after_the_migrations(postgres):
    with postgres.connect() as connection:
        found = connection.execute(text("SELECT tgname FROM pg_trigger WHERE tgname = :name"),
                                   {"name": TRIGGER}).scalar()
    assert found == TRIGGER


def test_an_own_promise_announced_and_replaced_meanwhile_is_not_added_back(feeding,
                                                                          postgres, now):
    """add() comes after the commit; by then the stream may have moved past it."""
    first = reservation("first", now, instance_uuid="i7")
    write(postgres, insert(models.InflightReservation).values(
        row("first", now) | {"instance_uuid": "i7"}))
    write(postgres, delete(models.InflightReservation))
    assert feeding.refresh(DEADLINE)
    feeding._feed.add(first)  # late: its insert and its delete were already applied
    assert list(feeding.active(now)) == []


def test_a_truncate_reloads(feeding, postgres, now):
    write(postgres, insert(models.InflightReservation).values(row("kept", now)))
    assert feeding.refresh(DEADLINE) and [r.id for r in feeding.active(now)] == ["kept"]
    write(postgres, text("TRUNCATE inflight_reservations"))
    assert feeding.refresh(DEADLINE) and list(feeding.active(now)) == []


def test_without_a_feed_there_is_no_gauge(engine):
    assert list(ReservationFeedCollector(ReservationStore(engine)).collect()) == []


def test_stop_all_ends_every_listener_this_process_started(database_url, monkeypatch):
    from cortex.store import reservation_feed

    # only this test's feeds: the session's shared feed must keep listening
    monkeypatch.setattr(reservation_feed, "_STARTED", reservation_feed.weakref.WeakSet())
    conninfo = make_url(database_url).set(drivername="postgresql").render_as_string(False)
    feeds = [reservation_feed.ReservationFeed(conninfo, list, lambda payload: None)
             for _ in range(2)]
    for feed in feeds:
        feed.start()
    assert eventually(lambda: all(f.current() is not None for f in feeds)), "never live"
    reservation_feed.stop_all(timeout=DEADLINE)
    assert all(not feed._thread.is_alive() for feed in feeds)
    assert all(feed.current() is None for feed in feeds)
