"""Alembic: the models and the migrations agree, upgrades are idempotent."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from cortex.db import migrate
from cortex.db.models import Base


def test_database_is_at_head(engine):
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_upgrade_twice_is_harmless(engine):
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_models_match_migrations(engine):
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []


def test_decision_records_use_lz4_where_the_server_has_it(engine):
    if engine.dialect.name != "postgresql":
        assert migrate.current_revision(engine) == migrate.head_revision()  # nothing to set
        return
    with engine.connect() as connection:
        has_lz4 = connection.execute(text(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
            "WHERE name = 'default_toast_compression'")).scalar()
        method = connection.execute(text(
            "SELECT attcompression FROM pg_attribute WHERE attrelid = 'decisions'::regclass "
            "AND attname = 'record'")).scalar()
    assert method == ("l" if has_lz4 else "")
