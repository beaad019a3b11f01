"""Alembic: the models and the migrations agree, upgrades are idempotent."""

from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from cortex.db import migrate
from cortex.db.engine import make_engine
from cortex.db.models import Base
from cortex.knowledge.reservations import Reservation
from cortex.store.reservations import ReservationStore


def test_database_is_at_head(engine):
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_upgrade_twice_is_harmless(engine):
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_models_match_migrations(engine):
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []


#: ``decisions.record``'s type and compression method (``l``: LZ4; empty: the default).
_RECORD_COLUMN = text("SELECT format_type(atttypid, atttypmod), attcompression "
                      "FROM pg_attribute WHERE attrelid = 'decisions'::regclass "
                      "AND attname = 'record'")
_HAS_LZ4 = text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'")


def test_decision_records_are_json_text_with_lz4_where_the_server_has_it(engine):
    if engine.dialect.name != "postgresql":
        assert migrate.current_revision(engine) == migrate.head_revision()  # nothing to set
        return
    with engine.connect() as connection:
        compressed = "l" if connection.execute(_HAS_LZ4).scalar() else ""
        assert tuple(connection.execute(_RECORD_COLUMN).one()) == ("json", compressed)


@pytest.fixture
def postgres_engine(empty_database_url):
    """An engine on a database of its own, not yet migrated; PostgreSQL's revisions only."""
    engine = make_engine(empty_database_url)
    if engine.dialect.name != "postgresql":  # CORTEX_TEST_DATABASE_URL=sqlite
        engine.dispose()
        pytest.fail("this test needs PostgreSQL: the revision changes PostgreSQL only")
    yield engine
    engine.dispose()


def downgrade(engine, revision):
    """Alembic's downgrade of ``engine``'s database to ``revision``."""
    cfg = migrate.alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.downgrade(cfg, revision)


def test_revision_0014_turns_records_into_json_and_back(postgres_engine):
    engine = postgres_engine
    migrate.upgrade(engine)
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO decisions (id, created_at, service, outcome, duration_ms, record) "
            "VALUES ('d1', now(), 'nova', 'ok', 1.0, "
            "'{\"detail\": \"x\\u0000y\", \"hosts\": [\"a\"]}'::json)"))
        compressed = "l" if connection.execute(_HAS_LZ4).scalar() else ""
        assert tuple(connection.execute(_RECORD_COLUMN).one()) == ("json", compressed)
    downgrade(engine, "0013")
    with engine.connect() as connection:
        assert tuple(connection.execute(_RECORD_COLUMN).one()) == ("jsonb", compressed)
        record = connection.execute(text("SELECT record FROM decisions")).scalar()
    assert record == {"detail": "x\ufffdy", "hosts": ["a"]}  # jsonb cannot hold NUL
    migrate.upgrade(engine)
    with engine.connect() as connection:
        assert tuple(connection.execute(_RECORD_COLUMN).one()) == ("json", compressed)
        assert connection.execute(text("SELECT record FROM decisions")).scalar() == record


_PROMISE_FUNCTION = text("SELECT count(*) FROM pg_proc WHERE proname = "
                         "'cortex_reserve_if_unchanged'")


def test_revision_0015_adds_the_promise_function_and_takes_it_back(postgres_engine):
    """Revision 0015's function is what an unchanged host's promise calls on PostgreSQL;
    downgrading drops it (the promise then fails, and is answered unpromised)."""
    engine = postgres_engine
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def made(rid):
        return Reservation(rid, "h1", f"i-{rid}", None, MappingProxyType({"VCPU": 1}), (),
                           now, now + timedelta(seconds=60))

    migrate.upgrade(engine)
    store = ReservationStore(engine)
    try:
        assert store.reserve_if_unchanged(made("a"), now, frozenset(), "i-a")
        downgrade(engine, "0014")
        with engine.connect() as connection:
            assert connection.execute(_PROMISE_FUNCTION).scalar() == 0
        with pytest.raises(psycopg.errors.UndefinedFunction):
            store.reserve_if_unchanged(made("b"), now, frozenset({"a"}), "i-b")
        migrate.upgrade(engine)
        with engine.connect() as connection:  # and revision 0023's, bounding its lock wait
            assert connection.execute(_PROMISE_FUNCTION).scalar() == 2
        assert store.reserve_if_unchanged(made("b"), now, frozenset({"a"}), "i-b")
    finally:
        store._engine.dispose()  # the process's pool for this URL: its database is dropped next
