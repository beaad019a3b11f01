"""Reservation changes are announced per statement; the promise announces its own row."""

import json
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import psycopg
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text

from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.knowledge.reservations import Reservation
from cortex.store.reservations import ReservationStore
from tests.waiting import DEADLINE

#: The tests' clock (``now`` fixture): a promise made now that expires in an hour.
NOW = LATER = datetime.min.replace(tzinfo=UTC)


@pytest.fixture(autouse=True, scope="module")
def now():
    """Read the clock once, when the module's first test runs (not at import)."""
    global NOW, LATER
    NOW = datetime.now(UTC).replace(microsecond=0)
    LATER = NOW + timedelta(hours=1)
    return NOW
#: The revision that makes the announcements per statement.
REVISION = "0022"


def listening(engine):
    """A connection to ``engine``'s database (outside its pool) listening on the
    reservations' channel."""
    raw = psycopg.connect(engine.url.set(drivername="postgresql")
                          .render_as_string(hide_password=False), autocommit=True)
    raw.execute("LISTEN cortex_reservations")
    return raw, raw


@pytest.fixture
def database(engine):
    """The session's database (PostgreSQL), a store on it and a listening connection;
    the reservations emptied before and after."""
    if engine.dialect.name != "postgresql":  # CORTEX_TEST_DATABASE_URL=sqlite
        pytest.fail("this test needs PostgreSQL: the announcements are NOTIFY")
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM inflight_reservations"))
    connection, raw = listening(engine)
    heard(raw)
    yield engine, ReservationStore(engine), raw
    connection.close()
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM inflight_reservations"))


def heard(raw) -> list[dict]:
    """The notifications committed so far, in order (a mark closes the stream)."""
    raw.execute("NOTIFY cortex_reservations, '{\"op\": \"mark\"}'")
    found = []
    for notification in raw.notifies(timeout=DEADLINE):
        change = json.loads(notification.payload)
        if change["op"] == "mark":
            break
        found.append(change)
    return found


def made(rid: str, host: str = "h1", instance: str = "i1") -> Reservation:
    return Reservation(rid, host, instance, None, MappingProxyType({"VCPU": 2}),
                       ("0000:1b:00.0",), NOW, LATER)


def table_row(engine, rid: str) -> dict:
    """The row as ``row_to_json`` writes it (what a trigger announces)."""
    with engine.connect() as connection:
        return connection.execute(text("SELECT row_to_json(r)::text FROM "
                                        "inflight_reservations r WHERE id = :id"),
                                  {"id": rid}).scalar()


def test_no_row_level_trigger_on_the_reservations(database):
    engine, _, _ = database
    with engine.connect() as connection:
        triggers = connection.execute(text(
            "SELECT tgname, tgtype & 1 FROM pg_trigger WHERE NOT tgisinternal "
            "AND tgrelid = 'inflight_reservations'::regclass ORDER BY tgname")).all()
    assert [name for name, _ in triggers] == [
        "inflight_reservations_notify", "inflight_reservations_notify_delete",
        "inflight_reservations_notify_truncate", "inflight_reservations_notify_update"]
    assert all(per_row == 0 for _, per_row in triggers)


def test_a_promise_announces_its_row_once_as_the_table_holds_it(database):
    engine, store, raw = database
    assert store.reserve_if_unchanged(made("a"), NOW, frozenset(), "i1")
    assert store.reserve_if_unchanged(made("b", "h2"), NOW, frozenset(), "i1")  # a move
    changes = heard(raw)
    assert [c["op"] for c in changes] == ["insert", "update"]
    assert changes[1]["row"] == json.loads(table_row(engine, "b"))
    assert changes[1]["row"]["gpus"] == ["0000:1b:00.0"]
    assert changes[0]["row"]["id"] == "a" and changes[0]["row"]["host"] == "h1"


def test_every_other_writer_is_announced_row_by_row(database):
    engine, store, raw = database
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO inflight_reservations (id, host, instance_uuid, resources, gpus, "
            "created_at, expires_at) VALUES ('x', 'h1', 'ix', '{}', '[]', :now, :later), "
            "('y', 'h2', NULL, '{}', '[]', :now, :later)"), {"now": NOW, "later": LATER})
    inserted = heard(raw)
    assert [(c["op"], c["old"], c["row"]["id"]) for c in inserted] == [
        ("insert", None, "x"), ("insert", None, "y")]
    assert inserted[0]["row"] == json.loads(table_row(engine, "x"))
    with engine.begin() as connection:
        connection.execute(text("UPDATE inflight_reservations SET host = 'h3'"))
        connection.execute(text("UPDATE inflight_reservations SET id = 'z' WHERE id = 'y'"))
        connection.execute(text("DELETE FROM inflight_reservations WHERE id = 'x'"))
    changes = [(c["op"], c["old"], c["row"] and (c["row"]["id"], c["row"]["host"]))
               for c in heard(raw)]
    assert sorted(changes[:2]) == [("update", "x", ("x", "h3")), ("update", "y", ("y", "h3"))]
    assert changes[2:] == [("update", "y", None), ("update", None, ("z", "h3")),
                           ("delete", "x", None)]


def test_a_promise_does_not_silence_the_rest_of_its_transaction(database):
    engine, _, raw = database
    with engine.begin() as connection:
        promised = connection.execute(text(
            "SELECT cortex_reserve_if_unchanged(1, 'p', 'h1', 'ip', NULL, '{}'::jsonb, "
            "'[]'::jsonb, :now, :later, :now, 'ip', '{}'::varchar[])"),
            {"now": NOW, "later": LATER}).scalar()
        connection.execute(text("DELETE FROM inflight_reservations WHERE id = 'p'"))
    assert promised == "p"
    assert [(c["op"], c["old"]) for c in heard(raw)] == [("insert", None), ("delete", "p")]


def test_the_row_trigger_comes_back_on_downgrade(empty_database_url):
    engine = make_engine(empty_database_url)
    if engine.dialect.name != "postgresql":  # CORTEX_TEST_DATABASE_URL=sqlite
        engine.dispose()
        pytest.fail("this test needs PostgreSQL: the announcements are NOTIFY")
    migrate.upgrade(engine)
    cfg = migrate.alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.downgrade(cfg, ScriptDirectory.from_config(cfg).get_revision(REVISION)
                          .down_revision)
    store = ReservationStore(engine)
    connection, raw = listening(engine)
    try:
        with store.lock_host("h1", NOW) as held:  # the row's write, without today's function
            held.reserve(made("a"))
        assert [(c["op"], c["row"]["id"]) for c in heard(raw)] == [("insert", "a")]
    finally:
        connection.close()
        store._engine.dispose()  # the process's pool for this URL: its database is dropped
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    engine.dispose()
